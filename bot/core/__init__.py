"""The bottom of bot/: the campaign model, the ports and the values they carry, and what a request means and what to
do (webhook events, commands, triggers, permission, base resolution, the decisions). Imports no store, GitHub or
publishing module."""
