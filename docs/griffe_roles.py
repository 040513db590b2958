"""Griffe extension for the API reference (mkdocs.yml): Sphinx cross-reference roles in docstrings as links.

creditflow's docstrings name other objects the Sphinx way, ``:func:`compute```, ``:class:`~a.b.StepBatch```.
mkdocstrings renders docstrings as Markdown, where such a role would show as literal text. This extension
rewrites each role into an optional autorefs reference: a link where the target is rendered somewhere in the
reference, plain code where it is not (a private helper, an object of a page not in the reference), so a role
never breaks the strict build. Short names resolve as Python would in the docstring's scope (the object's own
members, then its module's names and imports, then the parent modules'). A paragraph ending in ``::`` (reST's
literal-block marker; the indented block after it is already Markdown code) ends in ``:``, as Sphinx shows it.
"""

from __future__ import annotations

import html
import re

import griffe

LITERAL_MARKER = re.compile(r"(?<=\S)::(?=\n[ \t]*\n)")
ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|data|exc|obj|const):"
                  r"`(?P<tilde>~?)(?P<target>[^`<>]+?)(?:\(\))?`")


def _resolve(obj: griffe.Object, target: str) -> str | None:
    """The full path of ``target`` seen from ``obj``'s docstring, or None."""
    head, _, rest = target.partition(".")
    try:
        base = obj.resolve(head)  # its members, then its module's names and imports, then the parents'
    except (griffe.NameResolutionError, KeyError):
        return target if rest else None  # a full path, or a name this scope does not know
    return f"{base}.{rest}" if rest else base


def rewrite(text: str, obj: griffe.Object) -> str:
    def link(match: re.Match) -> str:
        target = match["target"].strip()
        shown = target.rsplit(".", 1)[-1] if match["tilde"] else target
        path = _resolve(obj, target)
        code = f"<code>{html.escape(shown)}</code>"
        if path is None:
            return code
        return f'<autoref identifier="{html.escape(path)}" optional>{code}</autoref>'

    return LITERAL_MARKER.sub(":", ROLE.sub(link, text))


class SphinxRoles(griffe.Extension):
    """Rewrites the roles of every docstring of a package once it is loaded."""

    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        seen: set[int] = set()

        def visit(obj: griffe.Object) -> None:
            if id(obj) in seen:
                return
            seen.add(id(obj))
            if obj.docstring is not None and ":" in obj.docstring.value:
                obj.docstring.value = rewrite(obj.docstring.value, obj)
            for member in obj.members.values():
                if not member.is_alias:
                    visit(member)

        visit(pkg)
