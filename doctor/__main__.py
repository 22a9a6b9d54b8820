"""``python -m doctor`` runs the same command line as the ``dl-doctor`` script."""

from doctor.cli import main

if __name__ == "__main__":
    main()
