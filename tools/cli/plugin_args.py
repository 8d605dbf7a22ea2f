"""``--plugin MODULE`` (repeatable) for the commands that build schedulers (``omega scheduler
run``, ``omega replay``, ``omega experiment``): the ``omega.plugins`` entry points and the
modules named are imported before anything names a scheduler kind or plugin, so what they
register (``schedulers.api``) is known. A module that cannot be loaded is a usage error: one
line, exit status 2."""

from __future__ import annotations


def add_plugin_arg(parser) -> None:
    parser.add_argument("--plugin", action="append", default=[], metavar="MODULE",
                        help="import MODULE first (it registers scheduler kinds or plugins, docs/EXTENDING.md; "
                             "repeatable); the omega.plugins entry points are loaded too")


def load_plugin_args(args) -> list[str]:
    """Load the entry points and ``args.plugin``; UsageError naming the one that failed."""
    from schedulers.api import PluginLoadError, load_plugins
    from tools.cli import UsageError

    try:
        return load_plugins(getattr(args, "plugin", None) or ())
    except PluginLoadError as exc:
        raise UsageError(f"--plugin: {exc}") from None
