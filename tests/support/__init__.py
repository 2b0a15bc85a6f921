"""Shared test support: fixtures' building blocks, reference models and real-service helpers.

Nothing here is collected as a test; test modules and bench/ import from it.
"""
