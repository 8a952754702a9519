"""The description of a test and its rules: options.py holds every default and limit and
the option classes (what a command line or an experiment asks for, no parsing);
testspec.py the test description both ends run, one table of fields, whatever protocol
carried it."""
