"""``tiered repair``: turn what ``tiered verify`` found into what is provably safe to do,
and do it.

:func:`plan_repair` runs :func:`~tiered_core.ops.verify.verify_store` and decides, for each
finding, from the live state (over a read-only driver and a private read-only copy of the
metadata: the dry run writes nothing anywhere):

* a :class:`RepairStep` with an action (:mod:`tiered_core.ops.repair_actions`,
  :mod:`tiered_core.ops.repair_index`) for every mendable finding;
* a *manual* step for what repair cannot mend: the kind's fix (restore from a copy of the
  bucket, take the prefix over, rebuild the metadata...) or why repair must not act;
* findings that need nothing (what is waiting to be tiered...) as information.

:func:`apply` carries a plan out inside a writer session of the store (the store lock, the
prefix claim under the store's id: a store open elsewhere or a prefix another store owns
refuses it before anything is written), through a driver fenced by the claim's epoch: it
first finishes moves an earlier run left half-done (:meth:`Quarantine.finish_pending
<tiered_core.ops.quarantine.Quarantine.finish_pending>`), then decides every step again
against the live state (the re-check) and acts only on what still holds. Nothing is ever
deleted outright: what leaves the prefix goes into this run's quarantine
(:mod:`tiered_core.ops.quarantine`). Every change is logged and reported.

The order of the steps matters and is fixed: the owner record, seals, then the listing's
data -- tails and unlisted objects, every commit-log object before every consume-queue one
(so units are checked against the commit log they point into, adopted bytes included) and
each file's objects by base offset (a tail is adopted before the unlisted segment that
continues it; a run of unlisted segments chains) --, segment times, and the key index last
(keys indexed again once for all the files that lost them).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, Iterable, Protocol

from tiered_core.codec.naming import parse_segment_path
from tiered_core.common import FileSegmentType, SegmentStatus
from tiered_core.errors import IllegalParam, TieredStoreError
from tiered_core.flat.ownership import PrefixOwnership, ReadOnlyDriver, load_store_id, tier_prefix
from tiered_core.metadata import open_metadata_read_only
from tiered_core.ops.findings import Finding, FindingKind, Severity, VerifyReport
from tiered_core.ops.quarantine import COPIED, REMOVED, Quarantine, QuarantineEntry, QuarantineRun, list_quarantine
from tiered_core.ops.repair_actions import (
    act,
    assume,
    decide_leftovers,
    decide_queue_row,
    decide_sealed,
    decide_tail,
    decide_times,
    decide_unlisted,
)
from tiered_core.ops.repair_index import (
    ADOPT_INDEX,
    act_index,
    decide_index,
    decide_unlisted_index,
    is_index_path,
    reindex_keys,
)
from tiered_core.ops.reconcile import backend_path
from tiered_core.ops.repair_context import CLAIM, REINDEX, Decision, RepairContext
from tiered_core.ops.verify_local import local_witness
from tiered_core.spi.metadata import TieredMetadataStore

log = logging.getLogger(__name__)


class Bar(Protocol):
    def update(self, n: int = 1) -> None: ...


#: ``progress(label, total)`` -> a context manager whose ``update(n)`` counts ``n`` more
#: of ``total`` (the CLI passes its :class:`~tiered_core.cli.progress.Progress`).
ProgressFactory = Callable[[str, int], ContextManager[Bar]]


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def __enter__(self) -> "_NoBar":
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def _bar(progress: ProgressFactory | None, label: str, total: int) -> ContextManager[Bar]:
    return progress(label, total) if progress is not None else _NoBar()


@dataclass
class RepairStep:
    """One finding and what repair does (``action``, ``detail``) or why it cannot
    (``manual``: the step left to the operator). After :func:`apply`: ``done`` (what was
    done), or ``skipped`` (why not, at the re-check), or ``error``."""

    finding: Finding
    action: str | None
    detail: str
    manual: str | None = None
    done: str | None = None
    skipped: str | None = None
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.finding.kind.value, "severity": self.finding.severity.value,
                "subject": self.finding.subject, "finding": self.finding.detail, "action": self.action,
                "detail": self.detail, "manual": self.manual, "done": self.done, "skipped": self.skipped,
                "error": self.error}


@dataclass
class RepairPlan:
    """What :func:`plan_repair` found and decided. ``steps``: the mendable findings with
    their action, in the order :func:`apply` takes them; ``manual``: what repair cannot mend,
    each with the manual step; ``nothing``: findings that need nothing (information, or no
    longer true at the decision); ``quarantine``: what the quarantine holds already."""

    config: Any
    report: VerifyReport
    steps: list[RepairStep] = field(default_factory=list)
    manual: list[RepairStep] = field(default_factory=list)
    nothing: list[RepairStep] = field(default_factory=list)
    quarantine: list[QuarantineRun] = field(default_factory=list)
    #: Moves earlier runs left unfinished (copied, not yet removed or rewritten), each with
    #: why ``--apply`` would leave it (None: ``--apply`` finishes it first).
    pending: list[tuple[QuarantineEntry, str | None]] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """0 when nothing is left that repair cannot mend, 1 otherwise."""
        return 1 if self.manual else 0

    def as_dict(self) -> dict[str, Any]:
        return {"prefix": self.report.prefix, "deep": self.report.deep, "exit_code": self.exit_code,
                "verify": self.report.summary(), "actions": [s.as_dict() for s in self.steps],
                "manual": [s.as_dict() for s in self.manual], "nothing": [s.as_dict() for s in self.nothing],
                "quarantine": [r.as_dict() for r in self.quarantine],
                "unfinished_from_earlier_runs": [{**e.as_dict(), "would_finish": why is None, "why": why}
                                                 for e, why in self.pending]}


@dataclass
class RepairResult:
    """What :func:`apply` did: the plan's steps with ``done`` / ``skipped`` / ``error`` set,
    the moves of earlier runs it finished (``finished``), the repair id and where its
    quarantine is, and how many messages had their keys indexed again."""

    plan: RepairPlan
    repair_id: str
    quarantine_dir: str
    owner_epoch: int
    finished: list[QuarantineEntry] = field(default_factory=list)
    #: Moves of earlier runs left unfinished: (entry, why, whether finishing it failed).
    unfinished: list[tuple[QuarantineEntry, str, bool]] = field(default_factory=list)
    moved: list[QuarantineEntry] = field(default_factory=list)
    keys_indexed: int = 0
    #: Findings planned as manual that the steps mended (a verify after them no longer finds them).
    mended: list[RepairStep] = field(default_factory=list)

    @property
    def done(self) -> list[RepairStep]:
        return [s for s in self.plan.steps if s.done is not None]

    @property
    def failed(self) -> list[RepairStep]:
        return [s for s in self.plan.steps if s.error is not None]

    @property
    def exit_code(self) -> int:
        """0 when every step was done or is no longer needed and nothing needs a manual
        step; 1 otherwise."""
        left = any(s.error is not None or (s.skipped is not None and s.manual is not None)
                   for s in self.plan.steps)
        return 1 if left or self.plan.manual or any(failed for _e, _w, failed in self.unfinished) else 0

    def as_dict(self) -> dict[str, Any]:
        return {"repair_id": self.repair_id, "quarantine": self.quarantine_dir, "owner_epoch": self.owner_epoch,
                "exit_code": self.exit_code, "steps": [s.as_dict() for s in self.plan.steps],
                "manual": [s.as_dict() for s in self.plan.manual],
                "finished_from_earlier_runs": [e.as_dict() for e in self.finished],
                "unfinished_from_earlier_runs": [{**e.as_dict(), "why": why, "failed": failed}
                                                 for e, why, failed in self.unfinished],
                "moved": [e.as_dict() for e in self.moved], "keys_indexed": self.keys_indexed,
                "mended": [s.as_dict() for s in self.mended]}


# -- deciding ----------------------------------------------------------------------------------

#: Steps in groups: the owner record, seals, the data of the listing (tails and unlisted
#: objects), segment times, the key index.
_GROUP = {FindingKind.OWNER_MISSING: 0, FindingKind.SEALED_MISMATCH: 1, FindingKind.UNCOMMITTED_TAIL: 2,
          FindingKind.BAD_TAIL: 2, FindingKind.UNLISTED_OBJECT: 2, FindingKind.TIME_BOUNDS_MISMATCH: 3,
          FindingKind.INDEX_MISSING: 4, FindingKind.INDEX_UNREADABLE: 4, FindingKind.LEFTOVER_PARTS: 5}
_TYPE_ORDER = {FileSegmentType.COMMIT_LOG: 0, FileSegmentType.CONSUME_QUEUE: 1, FileSegmentType.INDEX: 2}


def _order(finding: Finding) -> tuple:
    """Within the listing's data: every commit-log object before every consume-queue one
    (units are checked against the commit log they point into, adopted bytes included),
    each file's objects by base offset (a tail is adopted before the unlisted segment that
    continues it, a run of unlisted segments chains)."""
    try:
        info = parse_segment_path(finding.subject)
        where: tuple = (0, _TYPE_ORDER[info.file_type], info.topic, info.queue_id, info.base_offset)
    except (IllegalParam, KeyError):
        where = (1, 0, "", 0, 0)
    return (_GROUP.get(finding.kind, 9), *where, finding.subject)


def decide(ctx: RepairContext, finding: Finding) -> Decision:
    """The decision for one mendable finding against ``ctx``'s live state."""
    kind = finding.kind
    if kind is FindingKind.OWNER_MISSING:
        return Decision(CLAIM, "claim the prefix for this store (write its owner record, as its next open would)")
    if kind is FindingKind.SEALED_MISMATCH:
        return decide_sealed(ctx, finding)
    if kind in (FindingKind.UNCOMMITTED_TAIL, FindingKind.BAD_TAIL):
        return decide_tail(ctx, finding)
    if kind is FindingKind.UNLISTED_OBJECT:
        if finding.facts.get("missing") == "queue_row":
            return decide_queue_row(ctx, finding)
        if is_index_path(ctx, finding.subject):
            return decide_unlisted_index(ctx, finding)
        return decide_unlisted(ctx, finding)
    if kind is FindingKind.TIME_BOUNDS_MISMATCH:
        return decide_times(ctx, finding)
    if kind is FindingKind.LEFTOVER_PARTS:
        return decide_leftovers(ctx, finding)
    if kind in (FindingKind.INDEX_MISSING, FindingKind.INDEX_UNREADABLE):
        return decide_index(ctx, finding)
    return Decision.refuse(finding.fix)


def _decide_all(ctx: RepairContext, plan: RepairPlan, findings: Iterable[Finding]) -> None:
    findings = list(findings)
    owned_by_other = any(f.kind is FindingKind.OWNER_OTHER for f in findings)
    for finding in sorted(findings, key=_order):
        if owned_by_other and finding.mendable:
            # the prefix's objects are the other store's: nothing of them is adopted or moved
            why = "another store owns the prefix: repair does not act on its objects (see the owner_other finding)"
            plan.manual.append(RepairStep(finding, None, why, manual=why))
            continue
        if not finding.mendable:
            step = RepairStep(finding, None, finding.fix, manual=finding.fix)
            (plan.nothing if finding.severity is Severity.INFO else plan.manual).append(step)
            continue
        try:
            decision = decide(ctx, finding)
        except TieredStoreError as exc:
            decision = Decision.refuse(f"the re-check failed: {exc}")
        if decision.skip is None:
            plan.steps.append(RepairStep(finding, decision.action, decision.detail))
            assume(ctx, decision)
        elif decision.nothing_to_do:
            plan.nothing.append(RepairStep(finding, None, decision.skip))
        else:
            plan.manual.append(RepairStep(finding, None, decision.skip, manual=decision.skip))


def plan_repair(config: Any, *, deep: bool = True, topics: Iterable[str] | None = None,
                progress: ProgressFactory | None = None, report: VerifyReport | None = None) -> RepairPlan:
    """Verify the store ``config`` (a :class:`~tiered_core.config.StoreConfig`; ``report``:
    a verify report made just before, instead) and decide what repair would do about each
    finding (module doc). Read-only: no lock, no claim, no write anywhere. Raises what
    verify raises."""
    from tiered_core.ops.verify import prop_crc_policy, verify_store

    if report is None:
        report = verify_store(config, deep=deep, topics=topics, progress=progress)
    driver = ReadOnlyDriver(config.open_driver(), "tiered repair's dry run only reads")
    try:
        metadata = open_metadata_read_only(config.metadata, config.effective_metadata_path())
        try:
            prefix = tier_prefix(config.cluster, config.broker)
            plan = RepairPlan(config, report, quarantine=list_quarantine(driver, prefix))
            ctx = RepairContext(config, driver, metadata, prefix, prop_crc_policy(config),
                                witness=local_witness(config.store_path))
            # what --apply finishes before its steps (the same re-check as it makes)
            plan.pending = [(entry, _still_to_finish(ctx, entry)) for run in plan.quarantine
                            for entry in run.entries if entry.state == COPIED]
            _decide_all(ctx, plan, report.findings)
        finally:
            metadata.close()
    finally:
        driver.close()
    return plan


# -- applying ----------------------------------------------------------------------------------


class WriterSessionLike(Protocol):
    """What :func:`apply` needs of a :class:`~tiered_core.access.writer_session.WriterSession`
    (entered): the config, the backend driver and the writable metadata."""

    config: Any
    driver: Any

    @property
    def metadata(self) -> TieredMetadataStore: ...


def apply(plan: RepairPlan, session: WriterSessionLike, *, progress: ProgressFactory | None = None,
          repair_id: str | None = None) -> RepairResult:
    """Carry ``plan`` out inside ``session`` (an entered
    :class:`~tiered_core.access.writer_session.WriterSession` of the plan's store: it holds
    the store lock and the prefix claim). Every write goes through a driver fenced by the
    claim's epoch. Steps whose re-check fails are ``skipped``; a step that raises is
    recorded as its ``error`` and the others go on (a :class:`~tiered_core.errors.Fenced`
    error stops the run). Returns the result; raises what the session's driver raises for
    the quarantine's own bookkeeping."""
    from tiered_core.errors import Fenced
    from tiered_core.ops.verify import prop_crc_policy

    config = session.config
    if (config.cluster, config.broker) != (plan.config.cluster, plan.config.broker):
        raise IllegalParam("the writer session is not of the planned store", cluster=config.cluster,
                           broker=config.broker)
    prefix = tier_prefix(config.cluster, config.broker)
    ownership = PrefixOwnership(session.driver, config.cluster, config.broker, load_store_id(config.store_path),
                                config.store_path)
    record = ownership.claim()  # the session claimed it: this finds our record and writes nothing
    driver = ownership.guard(session.driver)
    quarantine = Quarantine(driver, prefix, repair_id)
    metadata = session.metadata
    ctx = RepairContext(config, driver, metadata, prefix, prop_crc_policy(config), quarantine,
                        witness=local_witness(config.store_path))
    result = RepairResult(plan, quarantine.repair_id, quarantine.root, record.epoch)
    log.warning("repair %s of %s: %d step(s) planned, quarantine %s", quarantine.repair_id, prefix,
                len(plan.steps), quarantine.root)
    result.finished = quarantine.finish_pending(lambda entry: _still_to_finish(ctx, entry))
    result.unfinished = list(quarantine.unfinished)
    windows: list[tuple[int, int]] = []
    with _bar(progress, "repair", len(plan.steps)) as bar:
        for step in plan.steps:
            try:
                _apply_step(ctx, step, windows, record.epoch)
            except Fenced:
                step.error = "fenced: another store took the prefix over; repair stopped"
                raise
            except TieredStoreError as exc:
                step.error = str(exc)
                log.error("repair %s: %s %s failed: %s", quarantine.repair_id, step.action, step.finding.subject,
                          exc)
            bar.update(1)
    if windows:
        problem = None
        try:
            result.keys_indexed, skipped = reindex_keys(ctx, windows, lambda total: _bar(progress, "re-index", total))
            if skipped:
                problem = "the keys of these queues could not be indexed again: " + "; ".join(skipped)
        except TieredStoreError as exc:
            problem = f"its keys could not be indexed again: {exc}"
        if problem is not None:
            log.error("repair %s: re-index: %s", quarantine.repair_id, problem)
            for step in plan.steps:
                if step.action == REINDEX and step.done is not None:
                    step.error = problem
    result.moved = list(quarantine.moved)
    if plan.manual and any(step.done is not None for step in plan.steps):
        _recheck_manual(config, plan, result)
    return result


def _recheck_manual(config: Any, plan: RepairPlan, result: RepairResult) -> None:
    """After steps were done: verify the queues of the findings left as manual again (as
    deep as the plan's verify) and take those it no longer finds out of ``plan.manual`` into
    ``result.mended`` (adopting a lost segment mends the units that pointed into it)."""
    from tiered_core.ops.verify import verify_store

    topics = {s.finding.topic for s in plan.manual}
    try:
        report = verify_store(config, deep=plan.report.deep, topics=None if None in topics else topics)
    except TieredStoreError as exc:
        log.warning("repair: the findings left as manual could not be verified again: %s", exc)
        return
    still = {(f.kind, f.subject) for f in report.findings}
    for step in list(plan.manual):
        if (step.finding.kind, step.finding.subject) not in still:
            step.done = "mended by the steps above: verify no longer finds it"
            plan.manual.remove(step)
            result.mended.append(step)


def _apply_step(ctx: RepairContext, step: RepairStep, windows: list[tuple[int, int]], epoch: int) -> None:
    finding = step.finding
    decision = decide(ctx, finding)
    if decision.skip is not None:
        step.skipped = decision.skip
        if not decision.nothing_to_do:
            step.manual = decision.skip
        log.warning("repair: %s %s left as it is: %s", finding.kind.value, finding.subject, decision.skip)
        return
    step.action, step.detail = decision.action, decision.detail
    if decision.action == CLAIM:
        step.done = f"this store owns the prefix (owner record of epoch {epoch})"
    elif decision.action in (REINDEX, ADOPT_INDEX):
        step.done = act_index(ctx, finding, decision)
        if decision.action == REINDEX:
            begin, end = decision.data["times"]
            windows.append((begin, end))
    else:
        step.done = act(ctx, finding, decision)
    log.warning("repair: %s %s: %s", finding.kind.value, finding.subject, step.done)


def _still_to_finish(ctx: RepairContext, entry: QuarantineEntry) -> str | None:
    """The re-check before finishing an earlier run's move: a removal only of an object no
    metadata record lists (an unreadable index file's record is dropped after its move); a
    rewrite only when it keeps every byte the metadata commits of the object (cutting what
    lies past them is what the move was for)."""
    known = {backend_path(ctx.cluster, m): m for m in ctx.metadata.iterate_file_segments()
             if m.status != SegmentStatus.DELETED}
    meta = known.get(entry.original)
    if entry.then == REMOVED:
        if meta is not None and entry.kind != FindingKind.INDEX_UNREADABLE.value:
            return "the metadata lists it now"
        return None
    if meta is not None and entry.keep is not None and meta.size > entry.keep:
        return f"the metadata commits {meta.size} bytes of it, more than the {entry.keep} the rewrite keeps"
    return None


__all__ = ["ProgressFactory", "RepairPlan", "RepairResult", "RepairStep", "apply", "decide", "plan_repair"]
