"""Google 2011 parts other than 0, and several parts as one trace, on part 0 cut in two at T:
the two halves imported together equal part 0, and the second half alone opens with the state
its rows show — every task it infers as running was running at T, on that machine."""

from __future__ import annotations

import csv
import gzip
import hashlib
from collections import defaultdict

import pytest

from tools.trace.format import TraceReader
from tools.trace.google2011.importer import import_google2011
from tools.trace.google2011.rows import TaskRows, opening_rows
from tools.trace.google2011.schema import JOB, MACHINE, SCHEDULE, SUBMIT, TASK, TYPE, ENDS, GoogleTraceError
from tools.trace.shared import traces_dir

GOOGLE = traces_dir() / "google-2011"
TASK_EVENTS = GOOGLE / "task_events" / "part-00000-of-00500.csv.gz"
JOB_EVENTS = GOOGLE / "job_events" / "part-00000-of-00500.csv.gz"
CUT_US = 4_200_000_000  # an hour into part 0's window
pytestmark = pytest.mark.skipif(not TASK_EVENTS.exists(), reason=f"public trace not found at {GOOGLE}")


@pytest.fixture(scope="module")
def halves(tmp_path_factory):
    """(rows up to the cut, rows after it) of part 0, and the two files."""
    rows = list(csv.reader(gzip.open(TASK_EVENTS, "rt", newline="")))
    before = [r for r in rows if int(r[0]) <= CUT_US]
    after = [r for r in rows if int(r[0]) > CUT_US]
    folder = tmp_path_factory.mktemp("parts")
    paths = []
    for name, part in (("a.csv.gz", before), ("b.csv.gz", after)):
        with gzip.open(folder / name, "wt", newline="") as f:
            csv.writer(f).writerows(part)
        paths.append(str(folder / name))
    return before, after, paths


def _events_digest(path) -> tuple[int, str]:
    digest, count = hashlib.sha256(), 0
    with TraceReader(path) as reader:
        reader.read_header()
        for event in reader:
            digest.update(repr(event).encode())
            count += 1
    return count, digest.hexdigest()


def test_two_consecutive_parts_import_as_the_one_they_were_cut_from(halves, tmp_path):
    _, _, (first, second) = halves
    import_google2011(str(TASK_EVENTS), str(JOB_EVENTS), tmp_path / "whole.omt")
    import_google2011([first, second], [str(JOB_EVENTS)], tmp_path / "parts.omt")
    assert _events_digest(tmp_path / "whole.omt") == _events_digest(tmp_path / "parts.omt")


def test_parts_out_of_order_are_a_one_line_error_naming_the_file(halves, tmp_path):
    _, _, (first, second) = halves
    with pytest.raises(GoogleTraceError, match="before the previous part's last") as caught:
        import_google2011([second, first], [str(JOB_EVENTS)], tmp_path / "bad.omt")
    assert first in str(caught.value) and "\n" not in str(caught.value)
    assert not (tmp_path / "bad.omt").exists()


def test_a_later_part_opens_with_the_tasks_its_rows_show_running_on_their_machines(halves, tmp_path):
    before, after, (_, second) = halves
    running: dict[tuple[str, str], str] = {}  # the truth at the cut, from the rows before it
    pending: set[tuple[str, str]] = set()
    for row in before:
        key, kind = (row[JOB], row[TASK]), int(row[TYPE])
        if kind == SUBMIT:
            pending.add(key)
            running.pop(key, None)
        elif kind == SCHEDULE:
            pending.discard(key)
            running[key] = row[MACHINE]
        elif kind in ENDS:
            pending.discard(key)
            running.pop(key, None)
    later = {(row[JOB], row[TASK]) for row in after}
    carried = defaultdict(int)
    inferred = opening_rows(TaskRows(second), int(after[0][0]), carried)
    inferred_running = {(r[JOB], r[TASK]): r[MACHINE] for r in inferred if int(r[TYPE]) == SCHEDULE}
    inferred_pending = {(r[JOB], r[TASK]) for r in inferred if int(r[TYPE]) == SUBMIT} - set(inferred_running)
    visible = {key: machine for key, machine in running.items() if key in later}
    assert inferred_running and all(running.get(key) == machine for key, machine in inferred_running.items())
    assert len(inferred_running) >= 0.95 * len(visible)  # the rest show a row naming no machine first
    assert inferred_pending <= pending | set(running)
    assert pending & later <= inferred_pending
    stats = import_google2011(second, str(JOB_EVENTS), tmp_path / "later.omt")
    said = {why: n for why, n in stats.skipped.items() if why.startswith("inferred opening state")}
    assert sum(said.values()) == len(inferred) - len(inferred_running)  # one count per inferred task
    assert stats.events["TaskPlaced"] >= len(inferred_running)  # placed at t = 0: the recorded opening
    with TraceReader(tmp_path / "later.omt") as reader:
        header = reader.read_header()
    assert f"opens at {int(after[0][0])} us" in header.notes
