"""The only code that talks to Kubernetes. Views never import it; services and tasks call its functions."""
