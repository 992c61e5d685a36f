"""The files a run leaves in its artifact directory, in the layouts AIPerf users parse."""
