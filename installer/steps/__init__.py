"""One module per setup step, in pipeline order (see installer.setup.plan_steps)."""
