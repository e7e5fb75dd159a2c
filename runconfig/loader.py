"""YAML configs with dotted ``key=value`` overrides, validated against a dataclass schema.

Every entry point (``train_gpt.py``, ``python -m training.show``, ``python -m data_prep``,
``python -m launch``) loads its config through :func:`load_config`, so the rules are the
same everywhere: the YAML file is merged onto the schema's defaults, then the overrides
in command-line order; an unknown key, a value of the wrong type or a value the schema
rejects raises :class:`ConfigError` naming the file and the dotted key.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

T = TypeVar("T")
_LITERAL_ERROR = re.compile(r"Invalid value ('.*'), expected one of (\[.*\])")
_NOT_A_LIST = "is not a ListConfig"


class ConfigError(ValueError):
    """A config file or override is invalid; the message names the file and key."""


_DASHED_OPTION = re.compile(r"--?([A-Za-z_][\w-]*(?:\.[\w-]+)*)(?:=(.*))?", re.DOTALL)


def schema_keys(schema: type) -> list[str]:
    """Every dotted leaf key of a config dataclass (``optimizer.lr``, ``model.num_layers``, ...)."""
    return sorted(flatten(OmegaConf.to_container(OmegaConf.structured(schema))))


def override_hint(
    unrecognized: Sequence[str], schema: type | None = None, argv: Sequence[str] | None = None
) -> str | None:
    """The ``key=value`` override meant by options argparse does not know, or None.

    torchtitan writes config keys as options (``--optimizer.lr=3e-4``, ``--optimizer.lr 3e-4``)
    and Megatron-LM has one flag per setting (``--num-layers 8``); here both are dotted
    ``key=value`` overrides. A dotted option is the key itself; an undotted one is looked up by
    its last part among ``schema``'s keys (dashes read as underscores), else in the table of
    Megatron-LM flags whose key has another name (``runconfig.megatron_args``: ``--train-iters``
    is ``training.steps``). ``argv``: the whole command line, where the option's value is found
    when argparse took it as an override (a command with ``key=value`` positionals)."""
    from runconfig.megatron_args import megatron_hint

    wanted: list[str] = []
    tokens = list(unrecognized)
    for i, token in enumerate(tokens):
        m = _DASHED_OPTION.fullmatch(token)
        if not m:
            continue
        name, value = m.group(1).replace("-", "_"), m.group(2)
        following = tokens[i + 1] if i + 1 < len(tokens) else None
        if argv is not None and token in argv:  # ``--lr 3e-4``: 3e-4 may have gone to the overrides
            at = list(argv).index(token)
            following = argv[at + 1] if at + 1 < len(argv) else None
        if value is None and following is not None and not following.startswith("-") and "=" not in following:
            value = following  # ``--lr 3e-4``: argparse left the value unclaimed beside its option
        if "." in name:
            wanted.append(f"{name}={'VALUE' if value is None else value}")
        elif schema is not None:
            keys = [k for k in schema_keys(schema) if k.rsplit(".", 1)[-1] == name]
            if keys:
                wanted.append(" or ".join(f"{k}={'VALUE' if value is None else value}" for k in keys))
            elif hint := megatron_hint(name, value, schema_keys(schema)):
                wanted.append(hint)
    if not wanted:
        return None
    return "config overrides are dotted key=value arguments without dashes: write " + ", ".join(wanted)


UNRECOGNIZED = "unrecognized arguments: "  # argparse's message for arguments no option takes


def unrecognized_message(extra: Sequence[str], schema: type | None = None, argv: Sequence[str] | None = None) -> str:
    """argparse's refusal of ``extra``, with :func:`override_hint`'s line where one names a config key."""
    message = UNRECOGNIZED + " ".join(extra)
    hint = override_hint(extra, schema, argv)
    return f"{message}\n{hint}" if hint else message


class OverridesParser(argparse.ArgumentParser):
    """argparse for a command that takes ``key=value`` overrides of ``override_schema``: an
    unknown option that names a config key (``--optimizer.lr=3e-4``, ``--num-layers 8``) is
    refused with the override to write instead (still argparse's exit 2)."""

    def __init__(self, *args: Any, override_schema: type | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.override_schema = override_schema
        self._argv: list[str] | None = None

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        self._argv = list(sys.argv[1:] if args is None else args)  # the option's value may land among the overrides
        return super().parse_known_args(args, namespace)

    def error(self, message: str):  # type: ignore[override]
        if message.startswith(UNRECOGNIZED):
            extra = message[len(UNRECOGNIZED) :].split(" ")
            message = unrecognized_message(extra, self.override_schema, self._argv)
        super().error(message)


def _describe(exc: OmegaConfBaseException, schema: type | None = None) -> str:
    key = getattr(exc, "full_key", None)
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    choice = _LITERAL_ERROR.match(first)
    if choice and key:  # a Literal-typed key: the same words as runconfig.checks.check_choice
        return f"{key}: must be one of {choice.group(2)}, got {choice.group(1)}"
    if _NOT_A_LIST in first and key:  # "AnyNode is not a ListConfig, ...": a scalar given for a list
        value = getattr(exc, "value", None)
        return f"{key}: must be a list, got {value!r} (YAML: [a, b]; command line: {key}='[a, b]')"
    if isinstance(exc, ConfigKeyError) and key and schema is not None:  # a key with Megatron-LM's name
        from runconfig.megatron_args import megatron_key_note

        note = megatron_key_note(str(key), schema_keys(schema))
        if note:
            first = f"{first}{' ' if first.endswith('?') else '; '}{note}"
    return f"key '{key}': {first}" if key else first


def parse_overrides(overrides: Sequence[str]) -> DictConfig:
    """Parse ``a.b=value`` strings (values in YAML syntax) into a config tree."""
    bad = [o for o in overrides if "=" not in o or o.startswith("=")]
    if bad:
        raise ConfigError(f"override {bad[0]!r} is not of the form key=value")
    try:
        return OmegaConf.from_dotlist(list(overrides))
    except OmegaConfBaseException as exc:  # pragma: no cover - malformed YAML value
        raise ConfigError(f"overrides: {_describe(exc)}") from exc


# libyaml's parser where PyYAML was built with it (the same SafeConstructor and resolvers, so the
# same values), about 15x faster than the pure-Python one: ``status`` parses every run's config.yaml.
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(text: str) -> Any:
    """``yaml.safe_load(text)`` with libyaml's parser when there is one; the one YAML reader of the
    config files and sweep files the toolkit reads in bulk (raises ``yaml.YAMLError`` like it)."""
    return yaml.load(text, Loader=_SAFE_LOADER)  # noqa: S506 - a safe loader


class ConfigBuilder:
    """:func:`load_config` for many override lists on one file: the schema's defaults, the file
    and ``extra`` are parsed and merged once, and each :meth:`build` merges only its overrides
    (a sweep validates every grid point: ~0.1 s each when everything was merged again per point).
    Errors are the ones :func:`load_config` raises for the same inputs."""

    def __init__(self, schema: type[T], path: str | os.PathLike | None = None, extra: Iterable[dict] = ()) -> None:
        self.schema, self.path = schema, None if path is None else Path(path)
        merged = OmegaConf.structured(schema)
        layers: list[tuple[str, Any]] = []
        if path is not None:
            path = Path(path)
            if not path.is_file():
                raise ConfigError(f"config file not found: {path}")
            try:
                data = load_yaml(path.read_text()) or {}
            except yaml.YAMLError as exc:
                raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
            if not isinstance(data, dict):
                raise ConfigError(f"{path}: top level must be a mapping, got {type(data).__name__}")
            layers.append((str(path), data))
        layers.extend(("overrides", d) for d in extra)
        for source, layer in layers:
            merged = self._merge(merged, source, layer)
        self._merged, self._layers = merged, layers

    def _merge(self, merged: Any, source: str, layer: Any) -> Any:
        try:
            return OmegaConf.merge(merged, layer)  # a new tree: ``merged`` is left as it was
        except OmegaConfBaseException as exc:
            raise ConfigError(f"{source}: {_describe(exc, self.schema)}") from exc
        except TypeError as exc:  # OmegaConf's bare "Cannot merge incompatible container types"
            raise ConfigError(f"{source}: {_container_clash(merged, layer) or exc}") from exc

    def build(self, overrides: Sequence[str] = ()) -> T:
        """A validated ``schema`` instance: defaults <- file <- extra dicts <- ``overrides``."""
        merged, layers = self._merged, list(self._layers)
        if overrides:
            layers.append(("command-line overrides", parse_overrides(overrides)))
            merged = self._merge(merged, *layers[-1])
        path = self.path
        try:
            return OmegaConf.to_object(merged)  # runs each dataclass's __post_init__ checks
        except OmegaConfBaseException as exc:
            raise ConfigError(f"{path or 'config'}: {_describe(exc)}") from exc
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"{_blamed(str(exc), layers, path)}: {exc}") from exc

    def build_with(self, loaded: T, values: Mapping[str, Any], overrides: Sequence[str]) -> T:
        """:meth:`build` of ``overrides`` where that config differs from ``loaded`` (a build of this
        builder) only in ``values``: dotted keys -> values of the schema's types, as a build returned
        them. ``loaded``'s dataclasses are built again with them, so every ``__post_init__`` check runs
        on the new values, without OmegaConf's merge, which deep-copies the whole tree (a sweep of
        2000 points spent 50 s there). Where a check refuses, the error is :meth:`build`'s."""
        try:
            rebuilt = _rebuilt(loaded, dict(values), "")
        except (ValueError, TypeError, KeyError):
            return self.build(overrides)  # the refusal, with the message of a full build
        return rebuilt


def _rebuilt(obj: Any, values: dict[str, Any], prefix: str) -> Any:
    """``obj`` (a dataclass) built again with the dotted ``values`` set; ``values`` is emptied, and a
    key it names that is not a field of ``obj``'s tree raises KeyError."""
    kwargs = {}
    for f in dataclasses.fields(obj):
        key = prefix + f.name
        value = getattr(obj, f.name)
        if key in values:
            value = values.pop(key)
        elif dataclasses.is_dataclass(value) and any(k.startswith(key + ".") for k in values):
            value = _rebuilt(value, values, key + ".")
        kwargs[f.name] = value
    if not prefix and values:
        raise KeyError(next(iter(values)))
    return type(obj)(**kwargs)


def _container_clash(old: Any, new: Any, key: str = "") -> str | None:
    """Where ``new`` puts a list on a mapping of ``old``, or a mapping on a list: a key whose schema
    type is free (``Any``, a sweep's grid entries and fixed overrides), which OmegaConf's merge
    refuses with a bare ``TypeError`` naming no key."""
    if isinstance(old, DictConfig | ListConfig):
        old = OmegaConf.to_container(old)
    if isinstance(new, DictConfig | ListConfig):
        new = OmegaConf.to_container(new)
    if isinstance(old, dict) and isinstance(new, dict):
        for name, value in new.items():
            if name in old and (found := _container_clash(old[name], value, f"{key}.{name}" if key else str(name))):
                return found
        return None
    kinds = {dict: "a mapping", list: "a list"}
    if {type(old), type(new)} == {dict, list}:
        return f"{key}: {kinds[type(new)]} given where the config holds {kinds[type(old)]}, got {new!r}"
    return None


def load_config(
    schema: type[T],
    path: str | os.PathLike | None = None,
    overrides: Sequence[str] = (),
    extra: Iterable[dict] = (),
) -> T:
    """Build a validated ``schema`` instance from defaults <- file <- extra dicts <- overrides."""
    return ConfigBuilder(schema, path, extra).build(overrides)


def _blamed(message: str, layers: list[tuple[str, Any]], path: Any) -> str:
    """Where a key a check's message names was last set: the command line's overrides (not the
    file, which may hold another value), the file, or the defaults. The key the message starts
    with ("key: ..." or "key=value: ...") and the keys it names after it (a cross-key check:
    "model.hidden_size: 64 is not divisible by model.num_attention_heads=5") count alike."""
    first = re.match(r"([A-Za-z_]\w*(?:\.\w+)+)(?::|=[^:\s]*:)", message)
    if first:
        named = {first.group(1), *re.findall(r"\b([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)=", message)}
        for source, layer in reversed(layers):
            if named & set(_keys_set(layer)):
                return source
    return str(path or "config")


def _keys_set(layer: Any) -> dict[str, Any]:
    """The dotted keys a config layer (a file's mapping, parsed overrides) sets, with their values."""
    tree = OmegaConf.to_container(layer) if isinstance(layer, DictConfig) else layer
    return flatten(tree) if isinstance(tree, dict) else {}


def overridden(keys: Iterable[str], overrides: Sequence[str]) -> list[str]:
    """``key=value`` for each of ``keys`` (in their order) that the command line's dotted
    ``overrides`` set: where a check made after loading (``validate_layout``) got its values."""
    given = _keys_set(parse_overrides(overrides)) if overrides else {}
    return [f"{key}={given[key]}" for key in keys if key in given]


def to_dict(cfg: Any) -> dict:
    """A plain, YAML-safe dict of a (nested) config dataclass."""
    return dataclasses.asdict(cfg)


def flatten(tree: dict, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}`` (lists are kept as values)."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, dotted + "."))
        else:
            out[dotted] = value
    return out


def changed_keys(old: dict, new: dict) -> dict[str, tuple[Any, Any]]:
    """Each flattened config key whose value differs: ``key -> (old, new)``, sorted by key."""
    a, b = flatten(old), flatten(new)
    return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


def describe_changes(changed: dict[str, tuple[Any, Any]], allowed: tuple[str, ...] = ()) -> list[str]:
    """``key: old -> new`` for each of :func:`changed_keys`' keys, but those ``allowed`` to change (prefixes)."""
    return [
        f"{k}: {o!r} -> {n!r}" for k, (o, n) in changed.items() if not any(k == p or k.startswith(p) for p in allowed)
    ]


def dump_yaml(cfg: Any) -> str:
    return yaml.safe_dump(to_dict(cfg) if dataclasses.is_dataclass(cfg) else cfg, sort_keys=False)
