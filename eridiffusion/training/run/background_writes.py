"""A run's files written on a thread of their own while its steps go on: a checkpoint (its training state,
its weights, the older ones keep_last lets go) or the best file is handed over as a job once its tensors are
copies in host memory, which the steps no longer change, and written there, each file atomically and on
the disk (fsync) before its move. On the Flux whole job (issue 44) the writes held the GPU idle: 10.7 s a
checkpoint of ~0.9 GB, a few seconds a best file.

One job at a time, in the order handed over: handing over the next one waits for the last (a run holds one
checkpoint's copies at most), and the run's end waits for the last, also when the run stops on an error,
Ctrl-C or Cancel, so a checkpoint once begun is finished, and a run that returns has written every file it
names. A job's failure (a full disk, say) is raised at the next hand-over or wait, naming the file."""

import concurrent.futures
import logging
import time
from collections.abc import Callable


class BackgroundWrites:
    """Jobs (functions of no arguments that write files) run in turn on one thread; `phases` gets each
    job's seconds under its name."""

    def __init__(self, phases: dict[str, float]) -> None:
        self.phases = phases
        self.pool: concurrent.futures.ThreadPoolExecutor | None = None
        self.pending: concurrent.futures.Future[None] | None = None

    def hand_over(self, name: str, job: Callable[[], None]) -> None:
        """Run `job` on the writer thread once the job before it has finished (its error raised here)."""
        self.wait()
        if self.pool is None:
            self.pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="eridiffusion-writes")
        self.pending = self.pool.submit(self._timed, name, job)

    def wait(self) -> None:
        """Until the job handed over last has finished; its error raised."""
        pending, self.pending = self.pending, None
        if pending is not None:
            pending.result()

    def close(self, failing: bool = False) -> None:
        """Wait for the last job and end the thread. `failing`: the run is stopping on an error of its own, which
        goes on to the caller, so a failed write is logged rather than raised over it."""
        try:
            self.wait()
        except Exception:
            if not failing:
                raise
            logging.getLogger(__name__).exception("EriDiffusion: a checkpoint could not be written")
        finally:
            if self.pool is not None:
                self.pool.shutdown(wait=True)
                self.pool = None

    def _timed(self, name: str, job: Callable[[], None]) -> None:
        started = time.perf_counter()
        job()
        self.phases[name] = self.phases.get(name, 0.0) + time.perf_counter() - started
