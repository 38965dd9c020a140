import verifiers.v1 as vf
from verifiers.v1.harnesses.null.harness import NullHarnessConfig
from verifiers.v1.utils.loaders import load_taskset, taskset_config_type


async def one_rollout(dataset: str, toolserver_url: str, model_url: str, model: str = "my-vlm") -> vf.Trace:
    """The first row of `dataset` (a JSONL file or directory, docs/ors.md's format), one rollout of `model` (an
    OpenAI-compatible endpoint) through verifiers' `null` chat harness with the profile's tools from toolserver."""
    config = taskset_config_type("verifiers-toolserver").model_validate({
        "id": "verifiers-toolserver", "dataset": dataset,
        "task": {"toolserver": toolserver_url, "profile": "pixel-reasoner"}})
    task = next(iter(load_taskset(config)))
    agent = vf.make_agent(vf.AgentConfig(
        model=model, client=vf.EvalClientConfig(base_url=model_url, api_key_var="MODEL_API_KEY"),
        harness=NullHarnessConfig(id="null"), runtime=vf.SubprocessConfig(), max_turns=8))
    async with agent:
        return await agent.run(task)  # .rewards["toolserver"].score: the profile's reward, from toolserver
