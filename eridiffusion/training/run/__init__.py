"""The run room: a run's settings, how it is built, its step loop and what is due after each step,
its state, resume, checkpoints, evaluation, samples and summary."""
