"""Metrics: what each request measured (`record`) and how a phase sums them up (`summary`)."""
