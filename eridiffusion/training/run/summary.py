"""The run's summary.json: what was trained, how fast, how far the evaluation loss fell, and the files."""


def run_summary(result, config):
    return {
        "steps": len(result.losses),
        "planned_steps": config.steps,
        "eval_loss_before": result.eval_loss_before,
        "eval_loss_after": result.eval_loss_after,
        "first_loss": result.losses[0],
        "last_loss": result.losses[-1],
        "seconds_per_step": result.seconds_per_step,
        "setup_seconds": result.setup_seconds,
        "first_step_seconds": result.first_step_seconds,
        "setup_phases": result.setup_phases,
        "between_steps_phases": result.between_steps_phases,
        "peak_memory_gib": result.peak_memory_gib,
        "processes": len(result.peak_memory_gib_per_process),
        "peak_memory_gib_per_process": result.peak_memory_gib_per_process,
        "block_swap": result.block_swap,
        "skipped_steps": result.skipped_steps,
        "validation": result.validation,
        "best_step": result.best["step"] if result.best else None,
        "best_validation_loss": result.best["loss"] if result.best else None,
        "best_checkpoint": result.best["path"] if result.best else None,
        "stopped_early": result.stopped_early,
        "stream_losses": result.stream_losses,  # audio-video: each stream's evaluation loss before and after
        "checkpoints": result.checkpoints,
        "samples": result.sample_paths,
        "config": config.as_dict(),
    }


def validation_summary(result):
    """The words a run's summary line adds on validation: the best step, and an early stop."""
    if not result.best:
        return ""
    early = f", stopped early at step {len(result.losses)}" if result.stopped_early else ""
    return (
        f"; best validation loss {result.best['loss']:.4g} at step {result.best['step']} "
        f"(checkpoints/best.safetensors){early}"
    )
