"""`kv-parity`'s command line: every parser and every command's body (`bot.cli.main` is the entry point; the exit
statuses they return are `bot.exit_codes`); the domain modules it calls take arguments, never an argv."""
