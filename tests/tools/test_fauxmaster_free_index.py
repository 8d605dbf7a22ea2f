"""The batch scheduler's indexed full scan finds exactly what the plain full scan finds: same
placements, same cursor, same reasons (compared through whole replays)."""

from __future__ import annotations

import pytest

import schedulers.batch as batch_module
from tools.fauxmaster.replay import ReplayConfig, replay

from test_fauxmaster_fit_memo import REAL_SERVICE, SCHEDULERS, crowded_trace


def cell_contents(result) -> dict[str, bytes]:
    return {kv.key: kv.value for kv in result.store.range(result.keys.prefix).kvs}


@pytest.mark.parametrize("schedulers", [SCHEDULERS, REAL_SERVICE], ids=["batch-chains", "real-service"])
@pytest.mark.parametrize("skip", [True, False], ids=["memo", "no-memo"])
def test_indexed_scan_replays_exactly_like_the_plain_scan(tmp_path, monkeypatch, schedulers, skip):
    trace = crowded_trace(tmp_path / "c.omt")
    config = dict(schedulers=schedulers, until=40.0, skip_nothing_fits=skip)
    indexed = replay(trace, ReplayConfig(**config))
    monkeypatch.setattr(batch_module, "chain_applies", lambda filters: False)
    plain = replay(trace, ReplayConfig(**config))
    assert indexed.to_dict(include_wall=False) == plain.to_dict(include_wall=False)
    assert cell_contents(indexed) == cell_contents(plain)  # reasons in the job records included
    assert "no machine fits" in str(cell_contents(plain))  # full scans that found nothing happened


def test_index_is_used_in_a_replay(tmp_path, monkeypatch):
    built = []
    original = batch_module.FreeIndex

    def recording(*args):
        built.append(args)
        return original(*args)
    monkeypatch.setattr(batch_module, "FreeIndex", recording)
    replay(crowded_trace(tmp_path / "c.omt"), ReplayConfig(schedulers=SCHEDULERS, until=20.0))
    assert built
