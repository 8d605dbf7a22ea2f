"""HTML pages from ``string.Template``s with every value escaped.

A template names its fields ``$name`` (``$$`` is a dollar sign). ``Template.render`` inserts each
value as text, escaped by ``html.escape`` (``&``, ``<``, ``>`` and both quotes), unless the value
is ``Html``: markup made by ``render`` or ``join``, which is inserted as is. So a page is built
from templates and values only, and a value can never add markup. A field the template names
but ``render`` is not given raises ``KeyError``; a malformed ``$`` raises ``ValueError``."""

from __future__ import annotations

import html
import string
from typing import Iterable


class Html(str):
    """Markup inserted as is: the result of ``Template.render`` or ``join``."""

    __slots__ = ()


def escape(value: object) -> Html:
    """``value`` as markup: ``Html`` unchanged, anything else its ``str`` escaped."""
    return value if isinstance(value, Html) else Html(html.escape(str(value)))


def join(items: Iterable[object], sep: str = "") -> Html:
    """The items, each escaped unless ``Html``, joined by ``sep`` (markup, as written)."""
    return Html(sep.join(escape(item) for item in items))


class Template:
    """A page fragment with ``$name`` fields; ``render`` fills them, escaping every value."""

    __slots__ = ("_template",)

    def __init__(self, text: str):
        self._template = string.Template(text)

    def render(self, **values: object) -> Html:
        return Html(self._template.substitute({name: escape(value) for name, value in values.items()}))

    def each(self, rows: Iterable[dict[str, object]], sep: str = "") -> Html:
        """``render`` of every dict in ``rows``, joined by ``sep``."""
        return Html(sep.join(self.render(**row) for row in rows))


EMPTY = Html("")

# the cells of an HTML table: a row of already rendered cells, a header cell, a data cell
TABLE_ROW = Template("<tr>$cells</tr>")
TH = Template("<th>$text</th>")
TD = Template("<td>$text</td>")
