"""One episode of a toolserver profile through OpenEnv's own client (`pip install openenv-core`): every profile is an
OpenEnv environment at `/openenv/<profile>`."""

from openenv.core import GenericEnvClient


def run_episode(server_url, profile, image_data_url, model_turns):
    observations = []
    with GenericEnvClient(base_url=f"{server_url}/openenv/{profile}").sync() as env:
        env.reset(images=[image_data_url])  # data URLs, allowed server paths or URLs; other fields are kept
        for turn in model_turns:
            result = env.step({"text": turn})  # the model's raw turn, read by the profile's call format
            observations.append(result.observation)  # messages (images as data URLs), prompt, metadata
            if result.done:
                break
    return observations
