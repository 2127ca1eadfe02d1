"""The embedded local stack: emulator, resources, event pump, servers (``lambdaserve dev``)."""
