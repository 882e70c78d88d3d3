"""The two modes side by side: the App service and Actions-only mode, each a ledger and the adapter that feeds
the one decision core (`bot.core.decisions`) with it, on the services both build the same way."""
