"""Runnable benchmark recipes, installed as ``deep500lite.recipes`` (see ``deep500lite list``)."""
