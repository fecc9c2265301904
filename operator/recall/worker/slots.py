"""What the worker's slots share: the jobs they picked, and their places within `max_jobs`.

    if slots.reserve():              # a place within max_jobs (False: none left)
        job = slots.pick(queue)      # a claimable job no other slot took
        ...                          # claim it, work it
        slots.let_go(job)            # another slot may pick it again
        slots.end(worked=True)       # the place given back; a job worked counts as done

Guarantees: the slots together claim at most `max_jobs` (a job done, or picked, claimed or
worked by another slot, counts against it); no two slots pick the same job; `enough` is set
once `max_jobs` jobs are done. Thread-safe: the pick (maybe a list) runs unlocked.
"""

from __future__ import annotations

import threading

from recall.base.settings import WorkerSettings
from recall.resources import TranscriptionJob
from recall.worker.queue import JobKey, Queue


class Slots:
    def __init__(self, settings: WorkerSettings) -> None:
        self.settings = settings  # its max_jobs, read at each reservation
        self.done = 0  # jobs worked
        self.enough = threading.Event()  # max_jobs reached: no slot takes another
        self._lock = threading.Lock()
        self._taking: set[JobKey] = set()  # jobs a slot picked and is claiming or works
        self._reserved = 0  # slots between a pick and the end of a claim or its work

    def reserve(self) -> bool:
        """A place for one more job within `max_jobs` (False: none left); given back by `end`."""
        with self._lock:
            if self._spoken_for_locked():
                return False
            self._reserved += 1
            return True

    def spoken_for(self) -> bool:
        """Every job left to `max_jobs` is done or in another slot's hands."""
        with self._lock:
            return self._spoken_for_locked()

    def _spoken_for_locked(self) -> bool:
        most = self.settings.max_jobs
        return most is not None and self.done + self._reserved >= most

    def pick(self, queue: Queue) -> TranscriptionJob | None:
        """A claimable job no other slot took (the pick, maybe a list, runs unlocked)."""
        while True:
            with self._lock:
                taken = frozenset(self._taking)
            job = queue.pick(taken)
            if job is None:
                return None
            with self._lock:
                if job.key not in self._taking:
                    self._taking.add(job.key)
                    return job

    def let_go(self, job: TranscriptionJob) -> None:
        """The slot is done with `job`, claimed or not."""
        with self._lock:
            self._taking.discard(job.key)

    def end(self, *, worked: bool) -> None:
        """The reservation given back; `worked`: a job was worked, and counts as done."""
        with self._lock:
            self._reserved -= 1
            if worked:
                self.done += 1
                if self.settings.max_jobs and self.done >= self.settings.max_jobs:
                    self.enough.set()
