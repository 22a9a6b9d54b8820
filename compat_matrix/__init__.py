"""The driver/CUDA/framework compatibility matrix: cited data files and a query API.

Every version fact dl-doctor judges by lives here as data with its source; no
check hard-codes a version number.  The data files and their loader arrive with
the matrix work (issue #3); until then no built-in check asks for the matrix.
"""
