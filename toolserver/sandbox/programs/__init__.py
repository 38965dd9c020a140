"""Environments' own cell runners: what a code-as-tool environment does with a cell inside the sandbox child
(its shell, its rewrites, its outputs), where `child.execute` would otherwise just `exec` the code. A profile names
one in its runner (`program`, one of `child.PROGRAMS`); the zygote imports them all before it forks, so a child pays
for none of their imports."""
