"""``python -m dl_doctor`` runs the same command line as the ``dl-doctor`` script."""

from dl_doctor.cli import main

if __name__ == "__main__":
    main()
