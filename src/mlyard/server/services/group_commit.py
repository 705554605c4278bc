"""Group commit: requests that write at the same moment share one transaction.

Most of what a submission's transaction costs does not grow with its jobs: beginning it, the
queue, project and nodes its checks read, taking ids, stamping the revision, committing. And
requests that write at once wait for the writer one after another anyway: SQLite has one, and
the server's interpreter runs one thread at a time on either database. So the request whose
turn it is stores the work of every request waiting by then, in one transaction, and the others
find theirs done when their turn comes. A lone request is stored as before, with no wait added.

A group that fails is stored again one request at a time, so that one request's bad input or
lost race never fails another: each gets its own answer, as if it had been alone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

Work = TypeVar("Work")
Result = TypeVar("Result")
_UNANSWERED = object()


class _Ticket(Generic[Work, Result]):
    __slots__ = ("work", "result", "error", "done")

    def __init__(self, work: Work):
        self.work = work
        self.result: Result | object = _UNANSWERED
        self.error: BaseException | None = None
        self.done = False


class GroupCommit(Generic[Work, Result]):
    """`store(works)` stores several requests' work in one transaction and returns their
    results in order; it raises when any of them fails, and nothing of the group is stored."""

    def __init__(self, store: Callable[[Sequence[Work]], list[Result]]):
        self._store = store
        self._pending: list[_Ticket[Work, Result]] = []
        self._pending_lock = threading.Lock()
        self._turn = threading.Lock()
        self.groups = 0
        """Transactions stored so far (groups, and requests stored alone after a failed group)."""

    @property
    def waiting(self) -> int:
        """Requests waiting for a turn, not yet taken along by one."""
        with self._pending_lock:
            return len(self._pending)

    def run(self, work: Work) -> Result:
        """Stores `work`, with whatever other threads are waiting to store; its result, or its
        error raised here."""
        ticket: _Ticket[Work, Result] = _Ticket(work)
        with self._pending_lock:
            self._pending.append(ticket)
        with self._turn:
            if not ticket.done:  # an earlier turn took it along otherwise
                with self._pending_lock:
                    group, self._pending = self._pending, []
                self._store_group(group)
        if ticket.error is not None:
            raise ticket.error
        return ticket.result  # type: ignore[return-value]

    def _store_group(self, group: list[_Ticket[Work, Result]]) -> None:
        try:
            try:
                self.groups += 1
                results = self._store([ticket.work for ticket in group])
            except Exception as error:
                if len(group) == 1:
                    group[0].error = error
                else:
                    self._store_alone(group)
            else:
                for ticket, result in zip(group, results, strict=True):
                    ticket.result = result
        finally:
            # Whatever stopped the turn (an interrupt, say) still answers every ticket of it.
            for ticket in group:
                if ticket.result is _UNANSWERED and ticket.error is None:
                    ticket.error = RuntimeError("the transaction storing this request was interrupted")
                ticket.done = True

    def _store_alone(self, group: list[_Ticket[Work, Result]]) -> None:
        for ticket in group:
            try:
                self.groups += 1
                [ticket.result] = self._store([ticket.work])
            except Exception as error:
                ticket.error = error
