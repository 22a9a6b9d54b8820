"""Ports that belong to notebooks, dashboards and daemons that should stay on loopback (DLD-SEC-004), shared by the
security probe (which looks up the owners of those listeners only) and the check that names them."""

RISKY_PORTS = {8888: "Jupyter", 8889: "Jupyter", 6006: "TensorBoard", 8265: "Ray dashboard", 2375: "Docker (no TLS)",
               2376: "Docker", 8080: "code-server", 5000: "MLflow", 7860: "Gradio", 8501: "Streamlit",
               6379: "Redis", 9000: "Jupyter/other"}
