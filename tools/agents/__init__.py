"""Hollow machine agents: simulate the machines of a cell (see ``tools.agents.agent``)."""
