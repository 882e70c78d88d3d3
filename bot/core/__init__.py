"""What a request means and what to do: webhook events, commands, triggers, permission, base resolution."""
