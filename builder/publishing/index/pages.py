"""The pages of a generation (pure: the model in, text by relative path out).

Per variant a find-links page that is a PEP 503 root at once (every project's wheels for that variant, and a
project page each); ``simple/`` with every project and wheel (PEP 503 HTML and PEP 691 JSON); the coverage page
(builder.publishing.coverage).
"""

from __future__ import annotations

import html
import json
import urllib.parse

import orjson

from builder.publishing import coverage
from builder.publishing.index.model import Index, parse_version


class Pages:
    """Renders one index. Escaping works per character, so the href's prefix is escaped once per page and
    each file's part once per run (a 5,000-wheel run links each file two or three times)."""

    def __init__(self, index: Index) -> None:
        self.index = index
        self._tails: dict[str, str] = {}

    def variant(self, key: str) -> dict[str, str]:
        """One variant folder: <key>/ is a find-links page (wheel anchors) and a PEP 503 root at once."""
        fns = self.index.variants[key]
        by_project = self._by_project(fns)
        out = {
            "index.html": _page(f"{', '.join(by_project)}: {key}", self._anchors(fns, 1) + _project_links(by_project))
        }
        for project, own in by_project.items():
            out[f"{project}/index.html"] = _page(f"Links for {project} ({key})", self._anchors(own, 2))
        return out

    def generation(self) -> dict[str, str]:
        """The pages outside the variant folders."""
        index = self.index
        by_project = self._by_project(sorted(index.files, key=index.order.__getitem__))
        by_project = by_project or {p: [] for p in index.projects}  # (an empty index still has its root pages)
        out = {
            "simple/index.html": _page("Simple index", _project_links(by_project)),
            "simple/index.json": _root_json(by_project),
        }
        for project, fns in by_project.items():
            out[f"simple/{project}/index.html"] = _page(f"Links for {project}", self._anchors(fns, 2))
            out[f"simple/{project}/index.json"] = self._json_project(project, fns, 2)
        out["index.html"] = coverage.render(index)
        return out

    def _by_project(self, fns: list[str]) -> dict[str, list[str]]:
        """``fns`` by project (in the index's project order), each in the order given."""
        if len(self.index.projects) == 1:
            return {self.index.projects[0]: fns} if fns else {}
        files = self.index.files
        groups: dict[str, list[str]] = {p: [] for p in self.index.projects}
        for fn in fns:
            groups[files[fn].project].append(fn)
        return {p: g for p, g in groups.items() if g}

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
        tail = f'{html.escape(external or _quote(fn))}#sha256={e.sha256}"'
        if e.requires_python:
            tail += f' data-requires-python="{html.escape(e.requires_python)}"'
        if not external:  # PEP 658: the .metadata file is served next to the wheel, so only from files/
            md = f"sha256={e.metadata_sha256}"
            tail += f' data-dist-info-metadata="{md}" data-core-metadata="{md}"'
        tail += f">{html.escape(fn)}</a><br>\n"
        self._tails[fn] = tail
        return tail

    def _json_project(self, project: str, fns: list[str], depth: int) -> str:
        index = self.index
        files = []
        prefix = index.href("", depth)
        for fn in fns:
            e = index.files[fn]
            md = {"sha256": e.metadata_sha256} if e.url is None else False
            files.append(
                {
                    "filename": fn,
                    "url": e.url or prefix + _quote(fn),
                    "hashes": {"sha256": e.sha256},
                    "requires-python": e.requires_python or None,
                    "core-metadata": md,
                    "dist-info-metadata": md,
                    "size": e.size,
                }
            )
        versions = sorted({index.files[fn].version for fn in fns}, key=parse_version)
        doc = {"meta": {"api-version": "1.1"}, "name": project, "versions": versions, "files": files}
        return orjson.dumps(doc).decode() + "\n"  # compact; orjson: 5,000 files in milliseconds


def _quote(fn: str) -> str:
    """A filename as a URL path segment: percent-encoded (a ``#`` or ``?`` would end the path; ``+`` and ``!`` are
    path characters, left as they are, so a farm wheel's link is its name)."""
    return urllib.parse.quote(fn, safe="+!")


def _page(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html>\n<html>\n  <head>\n    <meta name="pypi:repository-version" content="1.1">\n'
        f"    <title>{html.escape(title)}</title>\n  </head>\n  <body>\n    <h1>{html.escape(title)}</h1>\n"
        f"{body}  </body>\n</html>\n"
    )


def _project_links(projects) -> str:
    return "".join(f'    <a href="{p}/">{p}</a><br>\n' for p in projects)  # (canonical names: nothing to escape)


def _root_json(projects) -> str:
    return json.dumps({"meta": {"api-version": "1.1"}, "projects": [{"name": p} for p in projects]}, indent=1) + "\n"
