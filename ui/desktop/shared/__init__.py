"""What several tabs share: jobs, the open model and its estimate, hardware, speed, banner."""
