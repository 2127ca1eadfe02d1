"""The embedded local stack of ``lambdaserve dev``: the AWS emulator, resources from the
template, the repository mirror, the demo model and the dev command itself.

The top room under the CLI: it may import every other.
"""
