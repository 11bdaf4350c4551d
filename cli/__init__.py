"""The ``timeline`` command line: each command parses arguments, calls the library, renders, exits."""
