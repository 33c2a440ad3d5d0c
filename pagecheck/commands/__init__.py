"""One module per `pagecheck` subcommand; each exposes add_parser(subparsers) and run(args) -> int."""
