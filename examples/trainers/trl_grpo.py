"""TRL's GRPOTrainer with a toolserver profile as its environment (`pip install trl vlm-toolserver`): one session per
rollout, opened by `reset` with the row's images; the profile's tools are the class's methods, and the images they
return reach the VLM as images."""

from trl import GRPOConfig, GRPOTrainer

from toolserver.integrations.trl import environment_factory


def train(server_url, profile, model, processor, dataset, reward_funcs, args: GRPOConfig, tool_images="tool"):
    # tool_images="user": for chat templates that drop images in tool messages (the template is wrapped in place).
    environment = environment_factory(server_url, profile, tool_images=tool_images, processor=processor)
    trainer = GRPOTrainer(model=model, processing_class=processor, args=args, train_dataset=dataset,
                          reward_funcs=reward_funcs, environment_factory=environment)
    trainer.train()
    return trainer
