"""`kv-parity`'s command line: every parser, every command's body and every exit status (`bot.cli.main` is the
entry point); the domain modules it calls take arguments, never an argv."""
