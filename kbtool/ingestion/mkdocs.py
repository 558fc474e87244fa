"""A MkDocs site's settings, read from its ``mkdocs.yml``, so citations are the site's own URLs.

When the folder ingested is a MkDocs ``docs_dir`` (a ``mkdocs.yml`` or ``mkdocs.yaml`` in it or in
a folder above it, up to the git repository's root, whose ``docs_dir`` is that folder or holds
it), or holds one (a ``mkdocs.yml`` in the folder ingested: its ``docs_dir`` holds the pages):

* ``site_url`` is the source's base URL (a ``--base-url`` or a declared ``base_url`` wins);
* ``use_directory_urls`` says how a page is published (``a/b.md`` → ``a/b/``, else ``a/b.html``);
* headings without an explicit ``{ #id }`` get the id MkDocs gives them: the ``toc`` extension's
  ``slugify`` (default ``markdown.extensions.toc.slugify``; ``pymdownx.slugs.slugify(case=...)``,
  ``markdown.extensions.toc.slugify_unicode``) and ``separator``, called as MkDocs calls them, on the
  heading's text as Python-Markdown renders it, made unique per page as ``toc`` does (``_1``, ``_2``);
* ``nav`` titles name the pages that have no ``#`` title;
* ``exclude_docs`` and ``draft_docs`` say which files the built site leaves out: they get no URL.

The YAML is read safely: ``!!python/name:`` and ``!!python/object/apply:`` tags become references
that are never imported or run, except the slugify functions of Python-Markdown
(``markdown.extensions.toc``) and PyMdown Extensions (``pymdownx.slugs``); ``!ENV`` is read from the
environment as MkDocs reads it; any other tag is its plain value. ``INHERIT`` is followed. Without
a ``mkdocs.yml`` nothing here applies: only explicit anchors are kept.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

NAMES = ("mkdocs.yml", "mkdocs.yaml")  # the order MkDocs tries them in
PAGE_SUFFIXES = (".md", ".markdown", ".mdown", ".mkdn", ".mkd")  # what MkDocs renders as pages
SLUG_MODULES = ("markdown.extensions.toc", "pymdownx.slugs")  # the only code a mkdocs.yml may name that is run
DEFAULT_SLUGIFY = {"name": "markdown.extensions.toc.slugify"}


@dataclass(frozen=True)
class PyRef:
    """A ``!!python/name:X`` (``apply`` False) or ``!!python/object/apply:X`` reference: never run here."""

    name: str
    apply: bool = False
    args: tuple = ()
    kwds: tuple = ()  # sorted (key, value) pairs


def _loader():
    import yaml

    class Loader(yaml.SafeLoader):
        """SafeLoader plus MkDocs' tags: python references kept as names, !ENV read, others plain."""

    def name(loader, suffix, node):
        return PyRef(suffix)

    def apply(loader, suffix, node):
        if isinstance(node, yaml.MappingNode):
            value = loader.construct_mapping(node, deep=True)
            args, kwds = value.get("args") or [], value.get("kwds") or {}
        elif isinstance(node, yaml.SequenceNode):
            args, kwds = loader.construct_sequence(node, deep=True), {}
        else:
            args, kwds = [], {}
        kwds = kwds if isinstance(kwds, dict) else {}
        return PyRef(suffix, True, tuple(args) if isinstance(args, list) else (),
                     tuple(sorted((str(k), v) for k, v in kwds.items())))

    def env(loader, node):  # as pyyaml_env_tag, which MkDocs uses: the first variable set, else the default
        default = None
        if isinstance(node, yaml.ScalarNode):
            names = [loader.construct_scalar(node)]
        elif isinstance(node, yaml.SequenceNode):
            children = node.value
            if len(children) > 1:
                default = loader.construct_object(children[-1])
                children = children[:-1]
            names = [loader.construct_scalar(c) for c in children]
        else:
            return None
        for var in names:
            if var in os.environ:
                value = os.environ[var]
                tag = loader.resolve(yaml.ScalarNode, value, (True, False))
                return loader.construct_object(yaml.ScalarNode(tag, value))
        return default

    def other(loader, suffix, node):
        if isinstance(node, yaml.MappingNode):
            return loader.construct_mapping(node, deep=True)
        if isinstance(node, yaml.SequenceNode):
            return loader.construct_sequence(node, deep=True)
        return loader.construct_scalar(node) or None

    Loader.add_multi_constructor("tag:yaml.org,2002:python/name:", name)
    Loader.add_multi_constructor("tag:yaml.org,2002:python/object/apply:", apply)
    Loader.add_constructor("!ENV", env)
    Loader.add_multi_constructor("", other)  # any other tag (!relative, !!python/object:...): its plain value
    return Loader


class ConfigError(Exception):
    """A mkdocs.yml that cannot be read (reported as a warning; the folder is ingested without it)."""


def load_config(path: Path, _seen: tuple = ()) -> dict:
    """The mapping of a ``mkdocs.yml``, its ``INHERIT`` file merged in below it (as MkDocs merges)."""
    import yaml

    try:
        data = yaml.load(path.read_bytes(), Loader=_loader())  # noqa: S506 (a SafeLoader subclass)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" (line {where.line + 1})" if where is not None else ""
        raise ConfigError(f"{path}: not valid YAML{line}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: not a YAML mapping")
    parent = data.pop("INHERIT", None)
    if isinstance(parent, str):
        base = (path.parent / parent).resolve()
        if base in _seen or not base.is_file():
            raise ConfigError(f"{path}: INHERIT {parent!r} is not a file" if base not in _seen
                              else f"{path}: INHERIT {parent!r} inherits itself")
        data = _merge(load_config(base, _seen + (path.resolve(),)), data)
    return data


def _merge(base: dict, over: dict) -> dict:
    """``over`` on ``base``: mappings merged key by key, anything else replaced (mergedeep's default)."""
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _extensions(value) -> dict[str, dict]:
    """markdown_extensions as {name: config}: a list of names or {name: config}, or a mapping."""
    out: dict[str, dict] = {}
    items = value.items() if isinstance(value, dict) else ((None, v) for v in value or [])
    for key, item in items:
        if key is not None:
            out[str(key)] = item if isinstance(item, dict) else {}
        elif isinstance(item, str):
            out[item] = {}
        elif isinstance(item, dict):
            for k, cfg in item.items():
                out[str(k)] = cfg if isinstance(cfg, dict) else {}
    return out


def _spec(value) -> dict | None:
    """A toc ``slugify`` setting as a record ({name, args, kwds}); None: not a python reference."""
    if not isinstance(value, PyRef):
        return None
    spec: dict = {"name": value.name}
    if value.apply:
        spec["args"] = list(value.args)
        spec["kwds"] = dict(value.kwds)
    return spec


def spec_text(spec: dict | None) -> str:
    """``pymdownx.slugs.slugify(case=lower)`` for a slugify record."""
    if not spec:
        return "none"
    if "kwds" not in spec:
        return spec["name"]
    args = [repr(a) for a in spec.get("args") or []] + [f"{k}={v}" for k, v in sorted(spec["kwds"].items())]
    return f"{spec['name']}({', '.join(args)})"


class SlugError(Exception):
    """The slugify a mkdocs.yml names cannot be called here; the message says why and what follows."""


@lru_cache(maxsize=16)
def _slugifier(key: str):
    import importlib
    import importlib.util
    import json

    spec = json.loads(key)
    name = spec["name"]
    module, _, attr = name.rpartition(".")
    if module not in SLUG_MODULES:
        raise SlugError(f"slugify {name} is not one kbtool calls (only {', '.join(m + '.*' for m in SLUG_MODULES)}): "
                        "headings without an explicit { #id } get no anchor")
    try:
        importlib.import_module("markdown.extensions.toc")  # its unique() numbers repeated ids
        fn = getattr(importlib.import_module(module), attr)
    except ImportError:
        missing = "markdown" if importlib.util.find_spec("markdown") is None else "pymdown-extensions"
        raise SlugError(f"slugify {name}: {missing} is not installed here (pip install {missing}): headings "
                        "without an explicit { #id } get no anchor") from None
    except AttributeError:
        raise SlugError(f"slugify {name}: {module} has no {attr} (MkDocs would fail too): headings without an "
                        "explicit { #id } get no anchor") from None
    try:
        if "kwds" in spec:
            fn = fn(*spec.get("args") or [], **spec["kwds"])
        probe = fn("A b", "-")
    except Exception as exc:  # a factory named without apply, a wrong keyword: MkDocs fails the same way
        raise SlugError(f"slugify {spec_text(spec)} cannot be called as toc calls it ({type(exc).__name__}: "
                        f"{str(exc).splitlines()[0] if str(exc) else ''}): headings without an explicit "
                        "{ #id } get no anchor") from None
    if not isinstance(probe, str):
        raise SlugError(f"slugify {spec_text(spec)} does not return text: headings without an explicit "
                        "{ #id } get no anchor")
    return fn


def slugifier(spec: dict):
    """The function MkDocs' ``toc`` would slugify headings with (SlugError when it cannot be called)."""
    import json

    return _slugifier(json.dumps(spec, sort_keys=True, default=str))


def heading_ids(names: list[str], explicit: set[str], options: dict) -> list[str | None]:
    """The id MkDocs gives each heading of a page, in order, from its text as Python-Markdown renders
    it (``names``; None for a heading with an explicit id): toc's slugify and its ``unique`` (the
    page's explicit ids taken first, as toc takes every id already in the page)."""
    from markdown.extensions.toc import unique

    slug = slugifier(options["slugify"])
    sep = options.get("separator", "-")
    used = set(explicit)
    return [None if name is None else unique(slug(name, sep), used) for name in names]


def _nav_titles(nav) -> dict[str, str]:
    """Page path (relative to docs_dir) -> the title the nav gives it."""
    out: dict[str, str] = {}

    def walk(items) -> None:
        for item in items if isinstance(items, list) else []:
            if not isinstance(item, dict):
                continue
            for title, value in item.items():
                if isinstance(value, str) and "://" not in value and not value.startswith("/"):
                    out.setdefault(os.path.normpath(value).replace(os.sep, "/"), str(title))
                elif isinstance(value, list):
                    walk(value)

    walk(nav)
    return out


@dataclass
class Site:
    """What kbtool uses of one mkdocs.yml, for one ingest root."""

    config: Path
    sha256: str
    docs_dir: Path
    root: Path
    site_url: str | None = None
    use_directory_urls: bool = True
    slugify: dict = field(default_factory=lambda: dict(DEFAULT_SLUGIFY))
    separator: str = "-"
    attr_list: bool = False
    nav: dict = field(default_factory=dict)
    # exclude_docs and draft_docs (gitignore lines) with MkDocs' own defaults: files `mkdocs build` leaves out
    unpublished: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    slugs: bool = True  # the slugify can be called here

    def page(self, rel: str) -> str | None:
        """The path under docs_dir of the file at ``rel`` under the ingest root (None: not in docs_dir)."""
        path = (self.root / rel)
        if not path.is_relative_to(self.docs_dir):
            return None
        return path.relative_to(self.docs_dir).as_posix()

    def parse_options(self, rel: str) -> dict | None:
        """What parsing a page takes from the config (part of its parse options: a change re-parses);
        None for a file that is not one of the site's Markdown pages."""
        page = self.page(rel)
        if page is None or not page.lower().endswith(PAGE_SUFFIXES):
            return None
        opts = {"slugify": self.slugify if self.slugs else None, "separator": self.separator,
                "attr_list": self.attr_list}
        if self.nav.get(page):
            opts["nav_title"] = self.nav[page]
        return opts

    def record(self) -> dict:
        """The source record's ``mkdocs`` entry: what query-time URLs need, and what was read."""
        inside = self.docs_dir.is_relative_to(self.root)
        return {"config": str(self.config), "sha256": self.sha256, "site_url": self.site_url,
                "use_directory_urls": self.use_directory_urls,
                # the pages' folder relative to the root (the root holds mkdocs.yml), or the root's
                # folder relative to docs_dir (the root is docs_dir or a folder in it)
                "docs_dir": self.docs_dir.relative_to(self.root).as_posix() if inside else ".",
                "root_in_docs": "" if inside else self.root.relative_to(self.docs_dir).as_posix(),
                **({"unpublished": list(self.unpublished)} if self.unpublished else {})}

    def summary(self, base_url: str | None, base_from: str | None) -> dict:
        """The ingest report's entry for this site."""
        return {"config": str(self.config), "site_url": self.site_url, "base_url": base_url or self.site_url,
                "base_url_from": base_from if base_url else ("mkdocs.yml" if self.site_url else None),
                "use_directory_urls": self.use_directory_urls, "docs_dir": str(self.docs_dir),
                "slugify": spec_text(self.slugify) if self.slugs else None, "separator": self.separator,
                "attr_list": self.attr_list, "nav_titles": len(self.nav), "notes": list(self.notes)}


def find_site(root: Path, stop: Path | None = None) -> tuple[Site | None, list[str]]:
    """(the MkDocs site whose docs the folder ``root`` is, or holds, else None; warnings about
    mkdocs.yml files that could not be read). Looks in ``root`` and each folder above it up to
    ``stop`` (default: the git repository's root, else the file system's): only a mkdocs.yml whose
    docs_dir is ``root`` or holds it, or one in ``root`` itself, applies."""
    from .sources import repository_of

    root = root.resolve()
    if stop is None:
        stop = repository_of(root) or Path(root.anchor)
    warnings: list[str] = []
    for folder in (root, *root.parents):
        config = next((folder / n for n in NAMES if (folder / n).is_file()), None)
        if config is not None:
            try:
                data = load_config(config)
            except ConfigError as exc:
                warnings.append(f"{exc}: its site_url and heading ids are not used; fix it")
                data = None
            if data is not None:
                docs = data.get("docs_dir") or "docs"
                docs_dir = (folder / str(docs)).resolve()
                if root == docs_dir or root.is_relative_to(docs_dir) or (folder == root and docs_dir.is_relative_to(root)):
                    return _site(config, data, docs_dir, root), warnings
        if folder == stop or not folder.is_relative_to(stop):
            break
    return None, warnings


def _site(config: Path, data: dict, docs_dir: Path, root: Path) -> Site:
    site = Site(config=config, sha256=hashlib.sha256(config.read_bytes()).hexdigest(), docs_dir=docs_dir, root=root)
    url = data.get("site_url")
    if isinstance(url, str) and url.startswith(("http://", "https://")):
        site.site_url = url if url.endswith("/") else url + "/"
    elif url:
        site.notes.append(f"site_url {url!r} is not an http(s) URL: not used")
    udu = data.get("use_directory_urls", True)
    site.use_directory_urls = udu if isinstance(udu, bool) else True
    exts = _extensions(data.get("markdown_extensions"))
    site.attr_list = any(n in exts for n in ("attr_list", "markdown.extensions.attr_list"))
    toc = exts.get("toc") or exts.get("markdown.extensions.toc") or {}
    if "slugify" in toc:
        spec = _spec(toc["slugify"])
        if spec is None:
            site.notes.append(f"toc slugify {toc['slugify']!r} is not a !!python/name reference: MkDocs' "
                              "default is used")
        else:
            site.slugify = spec
    if isinstance(toc.get("separator"), str):
        site.separator = toc["separator"]
    try:
        slugifier(site.slugify)
    except SlugError as exc:
        site.slugs = False
        site.notes.append(str(exc))
    site.nav = _nav_titles(data.get("nav"))
    hidden = [line for key in ("exclude_docs", "draft_docs") if isinstance(data.get(key), str)
              for line in data[key].splitlines()]
    if hidden:
        site.unpublished = [".*", "/templates/", *hidden]  # MkDocs' defaults, then the site's
        import importlib.util

        if importlib.util.find_spec("pathspec") is None:
            site.notes.append("exclude_docs/draft_docs need pathspec to be read (pip install pathspec): the pages "
                              "they leave out of the site are cited as if published")
    return site
