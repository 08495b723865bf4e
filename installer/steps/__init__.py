"""One module per setup step, in pipeline order (see october.installer.pipeline.plan.plan_steps)."""
