"""Loads the devcluster pytest plugin for these tests unless the root conftest.py already registered it."""


def pytest_configure(config):
    if not config.pluginmanager.has_plugin("devcluster.pytest_plugin"):
        config.pluginmanager.import_plugin("devcluster.pytest_plugin")
