variable "kubeconfig_path" {
  description = "kubeconfig file of the cluster to deploy to."
  type        = string
  default     = "~/.kube/config"
}

variable "kube_context" {
  description = "kubeconfig context to use; null for the current one."
  type        = string
  default     = null
}

variable "namespace" {
  description = "Namespace of the service: one per team."
  type        = string
  default     = "{{ cookiecutter.team }}"
}

variable "create_namespace" {
  description = "Create the namespace; false when the team's namespace is managed elsewhere."
  type        = bool
  default     = true
}

variable "service" {
  description = "Name of the Deployment, Service and the other objects."
  type        = string
  default     = "{{ cookiecutter.service }}"
}

variable "owners" {
  description = "Owners of the service, recorded as an annotation."
  type        = string
  default     = "{{ cookiecutter.owners_annotation }}"
}

variable "models" {
  description = "Models the service serves (set in models.auto.tfvars.json by servinglib-generate)."
  type        = list(string)
}

variable "image" {
  description = "Image of the app container (built from the Dockerfile)."
  type        = string
  default     = "{{ cookiecutter.image }}"
}

variable "envoy_image" {
  description = "Image of the Envoy sidecar; the version envoy/envoy.yaml is validated with."
  type        = string
  default     = "{{ cookiecutter.envoy_image }}"
}

variable "workers" {
  description = "gunicorn worker processes per pod (SERVINGLIB_WORKERS); about one per CPU core."
  type        = number
  default     = {{ cookiecutter.workers }}
}

variable "cpu_request" {
  description = "CPU request of the app container."
  type        = string
  default     = "{{ cookiecutter.cpu_request }}"
}

variable "cpu_limit" {
  description = "CPU limit of the app container."
  type        = string
  default     = "{{ cookiecutter.cpu_limit }}"
}

variable "memory_request" {
  description = "Memory request of the app container."
  type        = string
  default     = "{{ cookiecutter.memory_request }}"
}

variable "memory_limit" {
  description = "Memory limit of the app container."
  type        = string
  default     = "{{ cookiecutter.memory_limit }}"
}

variable "replicas" {
  description = "Pods at first deployment; afterwards the autoscaler owns the count."
  type        = number
  default     = {{ cookiecutter.replicas }}
}

variable "min_replicas" {
  description = "Fewest pods the autoscaler keeps."
  type        = number
  default     = {{ cookiecutter.min_replicas }}
  validation {
    condition     = var.min_replicas >= 1
    error_message = "min_replicas must be at least 1."
  }
}

variable "max_replicas" {
  description = "Most pods the autoscaler starts."
  type        = number
  default     = {{ cookiecutter.max_replicas }}
}

variable "target_cpu_utilization" {
  description = "Average CPU utilization, in percent of the request, the autoscaler aims for."
  type        = number
  default     = {{ cookiecutter.target_cpu_utilization }}
  validation {
    condition     = var.target_cpu_utilization > 0 && var.target_cpu_utilization <= 100
    error_message = "target_cpu_utilization is a percentage from 1 to 100."
  }
}

variable "allowed_namespaces" {
  description = "Namespaces whose pods may call the service (Envoy's port); add your clients'."
  type        = list(string)
  default     = ["{{ cookiecutter.team }}", "monitoring"]
}

variable "otel_collector_host" {
  description = "Host of the OpenTelemetry collector (OTLP/HTTP on port 4318) Envoy and servinglib send traces to."
  type        = string
  default     = "otel-collector.observability.svc.cluster.local"
}

variable "trace_sampling_percent" {
  description = "Percent of requests without a caller's trace that Envoy starts a trace for."
  type        = number
  default     = 1
  validation {
    condition     = var.trace_sampling_percent >= 0 && var.trace_sampling_percent <= 100
    error_message = "trace_sampling_percent is a percentage from 0 to 100."
  }
}

variable "grpc_port" {
  description = "Port of the Service for Open Inference over gRPC (Envoy's gRPC listener behind it); 8001 is Triton's."
  type        = number
  default     = {{ cookiecutter.envoy_grpc_port }}
}

variable "service_type" {
  description = "Type of the Service: ClusterIP (inside the cluster) or LoadBalancer (a cloud load balancer in front of its REST and gRPC ports)."
  type        = string
  default     = "ClusterIP"
  validation {
    condition     = contains(["ClusterIP", "LoadBalancer"], var.service_type)
    error_message = "service_type is ClusterIP or LoadBalancer."
  }
}
