"""The speed room: what makes a step fast or lean without changing its numbers — CUDA graphs,
compute copies, fp8 products, fused kernels, gradient checkpointing, torch.compile — behind one
interface, step_path.StepPath."""
