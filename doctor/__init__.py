"""dl-doctor: the environment doctor for deep-learning machines.

The flow is probes -> facts -> checks -> reports (see DESIGN.md):
probes read the host (or a sysroot) through :class:`doctor.host.Host` and never
judge; checks are pure functions of the facts; renderers in ``reports`` turn a
report dictionary into terminal text, JSON and HTML.
"""

__version__ = "0.1.0"
