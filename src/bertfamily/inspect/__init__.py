"""Look inside: parameter table, traced dataflow, comparison table, explorer page."""

from .models import meta_model, resolve_config, shrink_layers
from .trace import Step, Trace, trace, trace_model

__all__ = ["Step", "Trace", "meta_model", "resolve_config", "shrink_layers", "trace", "trace_model"]
