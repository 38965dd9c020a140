"""OpenEnv's environment protocol over the core (meta-pytorch/OpenEnv @ 685de411; `openenv-core` 0.3.0): every
profile is an environment under `/openenv/{profile}` (the routes are `toolserver.api.routers.openenv`)."""
