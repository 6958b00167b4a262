"""The simulated engine: an OpenAI-compatible server over a step-based model of vLLM, SGLang or llama.cpp."""

from grill_locust.sim.params import PROFILES, EngineParams, resolve_params
from grill_locust.sim.process import SimProcess

__all__ = ["PROFILES", "EngineParams", "SimProcess", "resolve_params"]
