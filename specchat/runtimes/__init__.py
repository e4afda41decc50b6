"""How a model is loaded and run: the registry (models.yaml), loading, the compiled target, chat templates."""
