"""A PanDA look-alike served from incident fixtures, for the demo and the tests."""

from bamboo.panda.simulator.server import PandaSimulator

__all__ = ["PandaSimulator"]
