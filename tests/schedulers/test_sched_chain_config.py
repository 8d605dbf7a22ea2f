"""Chains from TOML: the default file, building schedulers from it, and errors that name the
table, entry, plugin and field."""

from __future__ import annotations

import pytest

from schedulers.borg.scheduler import BorgScheduler
from schedulers.chain_config import DEFAULT_CHAINS, ChainConfig, PluginSpec, load_chain_config
from schedulers.chains import make_scheduler
from schedulers.plugin import PluginConfigError


def test_default_file_builds_every_table():
    configs = load_chain_config(DEFAULT_CHAINS)
    assert set(configs) == {"borg", "batch", "service"}
    borg = make_scheduler("borg", "b", 1, configs["borg"].as_config())
    assert isinstance(borg, BorgScheduler)
    assert borg.k == 50 and borg.tricks["score_cache"]
    assert borg.pipeline.names()[:2] == ("machine_state", "different_machine")
    assert [[s.name for s, _ in stage] for stage in borg.pipeline.stages] == [
        ["priority_aware"], ["borg_hybrid", "package_locality"]]
    assert [w for _, w in borg.pipeline.stages[1]] == [3.0, 1.0]


def test_default_batch_and_service_tables_match_the_wired_chains():
    configs = load_chain_config(DEFAULT_CHAINS)
    for kind in ("batch", "service"):
        from_file = make_scheduler(kind, "s", 1, configs[kind].as_config()).pipeline
        wired = make_scheduler(kind, "s", 1).pipeline
        assert from_file.names() == wired.names()
        assert [len(stage) for stage in from_file.stages] == [len(stage) for stage in wired.stages]


def test_order_weights_args_and_stages(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('''
[mine]
kind = "borg"
k = 7
relaxed_randomization = false
filters = [{ name = "resources_fit", args = { ignore = ["disk"] } }, { name = "machine_state" }]
scorers = [
  { name = "worst_fit", weight = 2.5, stage = 1 },
  { name = "best_fit", stage = 0, args = { resources = ["memory"] } },
]
''')
    config = load_chain_config(path)["mine"]
    assert config.chain.filters[0] == PluginSpec("resources_fit", {"ignore": ("disk",)})
    sched = make_scheduler(config.kind, "x", 3, config.as_config())
    assert sched.k == 7 and not sched.tricks["relaxed_randomization"]
    assert sched.pipeline.names() == ("resources_fit", "machine_state", "best_fit", "worst_fit")
    assert sched.pipeline.filters[0].args.ignore == ("disk",)
    assert sched.pipeline.stages[1][0][1] == 2.5


BAD = [
    ('[b]\nkind = "borg"\nfilters = [{ name = "nope" }]', r"\[b\]: filters\[0\]: unknown plugin 'nope'"),
    ('[b]\nkind = "borg"\nfilters = [{ name = "least_loaded" }]', r"filters\[0\]: unknown plugin 'least_loaded'"),
    ('[b]\nkind = "borg"\nfilters = []', r"\[b\]: filters: a chain needs at least one filter"),
    ('[b]\nkind = "borg"\nfilters = [{ name = "machine_state" }]\n'
     'scorers = [{ name = "best_fit", weight = 0 }]', r"scorers\[0\] \(best_fit\): weight"),
    ('[b]\nkind = "borg"\nfilters = [{ name = "machine_state" }]\n'
     'scorers = [{ name = "best_fit", stage = -1 }]', r"scorers\[0\] \(best_fit\): stage"),
    ('[b]\nkind = "borg"\nfilters = [{ name = "machine_state", weight = 2 }]',
     r"filters\[0\] \(machine_state\): unknown fields \['weight'\]"),
    ('[b]\nkind = "borg"\nfilters = [{ name = "machine_state", args = { accept = ["gone"] } }]',
     r"\[b\]: filters\[0\] \(machine_state\): .*gone"),
    ('[b]\nkind = "borg"\nfilters = [{ name = "machine_state" }]\n'
     'scorers = [{ name = "borg_hybrid", args = { stranding = 2 } }]', r"\[b\]: scorers\[0\] \(borg_hybrid\): .*stranding"),
    ('[b]\nkind = "borg"\nfilters = [{ name = "machine_state" }, { name = "machine_state" }]',
     r"filters\[1\] \(machine_state\): listed twice"),
    ('[b]\nkind = "borg"\nk = 0\nfilters = [{ name = "machine_state" }]', r"\[b\]: .*k must be an int >= 1"),
    ('[b]\nkind = "borg"\nbogus = 1\nfilters = [{ name = "machine_state" }]', r"\[b\]: borg: unknown config keys"),
    ('[b]\nkind = "borg"\nserves = ["web"]\nfilters = [{ name = "machine_state" }]', r"serves: unknown job kind"),
    ('[b]\nkind = "fifo"\nfilters = [{ name = "machine_state" }]', r"\[b\]: kind: unknown scheduler kind 'fifo'"),
    ('[b\n', r"not valid TOML"),
]


@pytest.mark.parametrize("text,message", BAD,
                         ids=["unknown-plugin", "scorer-as-filter", "no-filters", "zero-weight", "negative-stage",
                              "filter-with-weight", "bad-filter-args", "bad-scorer-args", "duplicate",
                              "bad-k", "unknown-option", "bad-serves", "unknown-kind", "bad-toml"])
def test_errors_name_what_is_wrong(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(PluginConfigError, match=message) as info:
        load_chain_config(path)
    assert str(path) in str(info.value)


def test_make_scheduler_takes_a_chain_config():
    chain = ChainConfig((PluginSpec("machine_state"), PluginSpec("resources_fit")), (PluginSpec("best_fit"),))
    sched = make_scheduler("batch", "b", 1, {"chain": chain, "k": 3})
    assert sched.pipeline.names() == ("machine_state", "resources_fit", "best_fit")
    with pytest.raises(PluginConfigError, match="either chain"):
        make_scheduler("batch", "b", 1, {"chain": chain, "plugins": {}})
