"""A settings module that parses the program's arguments at import, as many training
programs do: a job that did not get the master's sys.argv would see the defaults."""

import argparse

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=0.001)
args, _ = parser.parse_known_args()
lr = args.lr
