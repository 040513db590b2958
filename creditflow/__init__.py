"""creditflow: credit assignment for multi-turn LLM agents trained on terminal rewards."""

__version__ = "0.1.0"
