"""The checks that ask transformers about a plan or an output."""
