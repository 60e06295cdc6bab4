"""The Trainium suite: the kernel on a NeuronCore, behind the trainium marker and --run-hw."""
