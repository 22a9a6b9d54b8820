"""Probes: collect facts, never judge.

A probe is a function of a :class:`ProbeContext` that returns a JSON-serialisable
dictionary, stored in the snapshot under the probe's name.  A probe reads the
host only through ``ctx.host``.  It may

* raise :class:`Unavailable` when its facts cannot be known here (an unbooted
  image has an empty ``/proc``): the facts are *unknown*, not broken;
* raise ``PermissionError`` (or call ``ctx.denied``) when privilege is missing:
  the report then says what running as root would add;
* raise anything else or hang: the engine records it in ``probe_errors`` and the
  rest of the run goes on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from dl_doctor.facts.contract import Fact
from dl_doctor.host import Host


class Unavailable(Exception):
    """The probe's facts cannot be known on this host (not an error)."""


@dataclass
class ProbeContext:
    host: Host
    options: Mapping[str, Any] = field(default_factory=dict)
    denials: List[str] = field(default_factory=list)
    input_errors: List[str] = field(default_factory=list)
    # The run's compatibility matrix (the one the application loaded, with its overlays), for the probes that need
    # knowledge to decide what to record (the consumer table); None when the caller gave none. Probes never load it.
    matrix: Optional[Any] = None

    def denied(self, what_root_would_add: str) -> None:
        """Record that part of the facts needs more privilege."""
        self.denials.append(what_root_would_add)

    def bad_input(self, what: str, reason: str) -> None:
        """Record that one file (or one program's output) could not be understood: its facts are missing, the rest
        of the probe's stand. Reported in ``probe_errors`` with kind ``input``."""
        if len(self.input_errors) < 100:
            text = reason if reason.startswith(what) else f"{what}: {reason}"
            self.input_errors.append(text[:1000])


@dataclass(frozen=True)
class ProbeSpec:
    name: str
    func: Callable[[ProbeContext], Dict[str, Any]]
    description: str
    root_adds: Optional[str] = None
    module: str = ""
    # Probes that legitimately take longer (running every interpreter) name the option that holds
    # their own time limit; the run's --timeout is the floor.
    timeout_option: Optional[str] = None
    # The facts this probe provides, as dotted paths below its name ("value", "devices"; "[]" an item of a list,
    # "*" a value of a map); empty: anything below its name.
    provides: Tuple[str, ...] = ()
    # The same, typed: the object stored under its name, each fact with its JSON type and meaning
    # (dl_doctor.facts.contract); the built-in probes' make the facts schema and docs/facts.md. None: untyped.
    facts: Optional[Fact] = None


def probe(name: str, description: str, root_adds: Optional[str] = None, timeout_option: Optional[str] = None,
          provides: Union[Sequence[str], Fact] = ()):
    """Declare a probe whose facts are stored under ``name``. ``provides``: the fact paths below it, as a tuple of
    dotted paths or typed, as one :class:`~dl_doctor.facts.contract.Fact` (an ``obj(...)``: the object stored under
    ``name``)."""
    if isinstance(provides, Fact):
        if "object" not in provides.types and "map" not in provides.types:
            raise TypeError(f"probe {name}: provides= must be an object (obj(...)), not {provides.type_text()}")
        typed: Optional[Fact] = provides
        paths = provides.paths()
    elif isinstance(provides, str):
        raise TypeError(f"probe {name}: provides= is a tuple of fact paths, not one string")
    else:
        typed, paths = None, tuple(provides)

    def wrap(func: Callable[[ProbeContext], Dict[str, Any]]) -> ProbeSpec:
        return ProbeSpec(name=name, func=func, description=description, root_adds=root_adds,
                         module=getattr(func, "__module__", ""), timeout_option=timeout_option,
                         provides=paths, facts=typed)

    return wrap
