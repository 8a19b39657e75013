"""Offline Anthropic API emulator: the real `anthropic` SDK talks to it over loopback HTTP.

`emulator.server.EmulatorServer` runs it in-process; `emulator.cli.main` runs it standalone.
Pipeline code (tasks/, checkpoints/) never imports this package.
"""
