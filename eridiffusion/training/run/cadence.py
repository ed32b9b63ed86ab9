"""What is due after a step: reading the losses back, a checkpoint, samples, a validation check,
and whether the run ends here (its last step, Stop & save, or an early stop)."""

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Due:
    log: bool  # read the steps' losses back (the one device sync), and check they are finite
    checkpoint: bool  # a periodic checkpoint (the last step's is written when the run ends)
    samples: bool
    validation: bool
    last: bool  # the run's last step: by its step count, Stop & save or an early stop
    stop: bool  # the run ends before its step count (Stop & save, an early stop)
    early_stop: bool = False  # early_stop_patience ran out


class Cadence:
    """The cadence of a run of TrainConfig `config`: samples every `sample_every` steps (None: no
    samples), validation checks when `validating`."""

    def __init__(self, config, sample_every=None, validating=False):
        self.config, self.sample_every, self.validating = config, sample_every, validating

    def after(self, done, stop_asked):
        """What is due after `done` steps; `stop_asked`: every process was asked (or one) to stop."""
        config = self.config
        last = done == config.steps or stop_asked
        checkpoint = bool(config.save_every) and done % config.save_every == 0 and not last
        samples = self.sample_every is not None and (done % self.sample_every == 0 or last)
        validation = self.validating and (done % config.validate_every == 0 or last)
        log = done % config.log_every == 0 or last or checkpoint or samples or validation
        # checkpoints, samples and validation come after a read-back: none is made from a diverged adapter
        return Due(log, checkpoint, samples, validation, last, stop_asked)

    def after_validation(self, due, checks_since_best):
        """`due` ended here, as Stop & save ends a run, when early_stop_patience checks in a row found
        no better validation loss (not on the last step: the run ends there anyway)."""
        patience = self.config.early_stop_patience
        if not patience or checks_since_best < patience or due.last:
            return due
        return replace(
            due, last=True, stop=True, early_stop=True, checkpoint=False, samples=self.sample_every is not None
        )
