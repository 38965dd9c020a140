"""Tools: one module each. `toolserver.profiles` assembles them into profiles."""
