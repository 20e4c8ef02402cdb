"""The pages of a generation (pure: the model in, text by relative path out).

Per variant a find-links page that is a PEP 503 root at once; ``simple/`` with every wheel (PEP 503 HTML and
PEP 691 JSON); the coverage page (builder.coverage).
"""

from __future__ import annotations

import html
import json

import orjson

from builder import coverage
from builder.index.model import PROJECT, Index, parse_version

_PROJECT_LINK = f'    <a href="{PROJECT}/">{PROJECT}</a><br>\n'


class Pages:
    """Renders one index. Escaping works per character, so the href's prefix is escaped once per page and
    each file's part once per run (a 5,000-wheel run links each file two or three times)."""

    def __init__(self, index: Index) -> None:
        self.index = index
        self._tails: dict[str, str] = {}

    def variant(self, key: str) -> dict[str, str]:
        """One variant folder: <key>/ is a find-links page (wheel anchors) and a PEP 503 root at once."""
        fns = self.index.variants[key]
        return {
            "index.html": _page(f"{PROJECT}: {key}", self._anchors(fns, 1) + _PROJECT_LINK),
            f"{PROJECT}/index.html": _page(f"Links for {PROJECT} ({key})", self._anchors(fns, 2)),
        }

    def generation(self) -> dict[str, str]:
        """The pages outside the variant folders."""
        index = self.index
        every = sorted(index.files, key=index.order.__getitem__)
        return {
            "simple/index.html": _page("Simple index", _PROJECT_LINK),
            "simple/index.json": _root_json(),
            f"simple/{PROJECT}/index.html": _page(f"Links for {PROJECT}", self._anchors(every, 2)),
            f"simple/{PROJECT}/index.json": self._json_project(every, 2),
            "index.html": coverage.render(index),
        }

    def _anchors(self, fns: list[str], depth: int) -> str:
        """The wheel links of one page."""
        files = self.index.files
        head = f'    <a href="{html.escape(self.index.href("", depth))}'
        tails = self._tails
        return "".join(
            (head if files[fn].url is None else '    <a href="') + (tails.get(fn) or self._anchor_tail(fn))
            for fn in fns
        )

    def _anchor_tail(self, fn: str) -> str:
        """The anchor after the page's common href prefix (after `href="` for a wheel hosted elsewhere)."""
        e = self.index.files[fn]
        external = e.url
        tail = f'{html.escape(external or fn)}#sha256={e.sha256}"'
        if e.requires_python:
            tail += f' data-requires-python="{html.escape(e.requires_python)}"'
        if not external:  # PEP 658: the .metadata file is served next to the wheel, so only from files/
            md = f"sha256={e.metadata_sha256}"
            tail += f' data-dist-info-metadata="{md}" data-core-metadata="{md}"'
        tail += f">{html.escape(fn)}</a><br>\n"
        self._tails[fn] = tail
        return tail

    def _json_project(self, fns: list[str], depth: int) -> str:
        index = self.index
        files = []
        prefix = index.href("", depth)
        for fn in fns:
            e = index.files[fn]
            md = {"sha256": e.metadata_sha256} if e.url is None else False
            files.append(
                {
                    "filename": fn,
                    "url": e.url or prefix + fn,
                    "hashes": {"sha256": e.sha256},
                    "requires-python": e.requires_python or None,
                    "core-metadata": md,
                    "dist-info-metadata": md,
                    "size": e.size,
                }
            )
        versions = sorted({index.files[fn].version for fn in fns}, key=parse_version)
        doc = {"meta": {"api-version": "1.1"}, "name": PROJECT, "versions": versions, "files": files}
        return orjson.dumps(doc).decode() + "\n"  # compact; orjson: 5,000 files in milliseconds


def _page(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html>\n<html>\n  <head>\n    <meta name="pypi:repository-version" content="1.1">\n'
        f"    <title>{html.escape(title)}</title>\n  </head>\n  <body>\n    <h1>{html.escape(title)}</h1>\n"
        f"{body}  </body>\n</html>\n"
    )


def _root_json() -> str:
    return json.dumps({"meta": {"api-version": "1.1"}, "projects": [{"name": PROJECT}]}, indent=1) + "\n"
