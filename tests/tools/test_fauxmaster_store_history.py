"""The fauxmaster's memory store keeps no history by default; keeping it changes no figure."""

from __future__ import annotations

import pytest

from cellstate.store import Compacted
from tools.fauxmaster.replay import ReplayConfig, replay

from fauxmaster_traces import mixed_trace

BOTH = [dict(name="batch", kind="batch", seed=3), dict(name="service", kind="service")]


def test_a_replay_without_store_history_gives_the_same_figures(tmp_path):
    trace = mixed_trace(tmp_path / "mixed.omt")
    light = replay(trace, ReplayConfig(schedulers=BOTH, sample_every_s=1.0))
    full = replay(trace, ReplayConfig(schedulers=BOTH, sample_every_s=1.0, store_history=True))
    plain_light, plain_full = light.to_dict(include_wall=False), full.to_dict(include_wall=False)
    assert plain_light.pop("config")["store_history"] is False
    assert plain_full.pop("config")["store_history"] is True
    assert plain_light == plain_full
    assert light.check["ok"] and light.store.history is False
    old = light.store.revision() - 1
    with pytest.raises(Compacted):
        light.store.range(light.keys.prefix, old)
    assert full.store.range(full.keys.prefix, old).revision == old
